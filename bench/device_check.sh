#!/usr/bin/env bash
# The trainer's GPU check, as one command for a lent device machine (docs/BENCHMARKS.md#gpu): the
# machine, a rank's set-up step by step, then the 1-GPU runs with forked ranks (the default launch)
# and with exec. Needs MNIST in .gpudata/mnist (git-ignored through .git/info/exclude, carried with
# the call); writes its logs and JSON under $OUT. Prepare here, from the repository root:
#
#   printf '/.gpudata/\n' >> .git/info/exclude; mkdir -p .gpudata; cp -r ../shared/data/mnist .gpudata/
#
# then run `bash bench/device_check.sh` on the device machine with `.gpudata` carried.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
DATA=.gpudata/mnist
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  echo "== set-up, first process"; python3 bench/bench_device_setup.py --data "$DATA"
  echo "== set-up, second process"; python3 bench/bench_device_setup.py --data "$DATA"
} 2>&1 | tee "$OUT/setup.txt"
bench() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 bench/bench_trainer.py --data "$DATA" --only GPU --json "$OUT/$name.json" "$@" \
    >"$OUT/$name.log" 2>&1
  echo "== $name: exit $?"
  grep -v '^  \[' "$OUT/$name.log" | tail -30
}
bench gpu-fork 120 --seeds 0,1,2
bench gpu-exec 90 --seeds 0,1 --launch exec
bench gpu-b512 100 --seeds 0,1 --epochs=3 --batch-size=512
echo "results in $OUT"
