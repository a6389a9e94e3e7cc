# The README's commands. `make run`: the dev stack's training job through the local scheduler, no
# cluster needed. `make test`: lint, the project-file schema check and the whole test suite.
PYTHON ?= python3
VENV := .venv
INFRA_VENV := .venv-infra
POLICY_VENV := policy/.venv
STACK ?= dev

# pytest-xdist workers for `make test` and `make test-fast`: one more than the cores, at most 4 (the
# training tests start two ranks each). The tests' real processes spend much of their time waiting
# (collective timeouts, back-offs, servers starting and stopping), which the extra worker fills; see
# docs/BENCHMARKS.md#the-test-suite. TEST_WORKERS=N sets the number, TEST_WORKERS=0 runs everything
# in one process. Whole files go to one worker (loadfile), so a module's trained model or server is
# built once; xdist hands them out by number of tests, which mixes the quick files of many tests with
# the long local runs (measured faster than the long files first: docs/BENCHMARKS.md).
# The tests' processes (pytest's workers, and each trainer, launcher, server and CLI they start) keep
# the project's bytecode in __pycache__/ (git-ignored) even where the environment sets
# PYTHONDONTWRITEBYTECODE: without it every process compiles what it imports again, and pytest
# rewrites every test module in every worker (docs/BENCHMARKS.md#the-test-suite).
KEEP_BYTECODE := PYTHONDONTWRITEBYTECODE=
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(min((os.cpu_count() or 1) + 1, 4))')
XDIST = -n $(TEST_WORKERS) --dist=loadfile

.PHONY: run render test test-fast e2e e2e-local e2e-node cluster-build cluster-up cluster-down node-up rehearse lint golden schema reference infra-env deploy-env lock clean \
	manifests manifests-check mlflow-server-env test-mlflow \
	image image-push docs docs-serve

# Every install is constrained by constraints.txt, the full dependency closure that `make lock`
# resolves from pyproject.toml's pins (tests/ci/test_lock.py fails when it is stale).
$(INFRA_VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(INFRA_VENV)
	$(INFRA_VENV)/bin/pip install -q -c constraints.txt -e ".[infra]"
	touch $@

# The policy pack's own environment, where PulumiPolicy.yaml names it (the CLI runs the pack with it).
$(POLICY_VENV)/.installed: policy/requirements.txt constraints.txt
	$(PYTHON) -m venv $(POLICY_VENV)
	$(POLICY_VENV)/bin/pip install -q -c constraints.txt -r policy/requirements.txt
	touch $@

# .venv holds torch with its CUDA libraries: 5.8 GiB installed (Python 3.11, torch 2.13.0). Its install
# stops first, with one line, when the disk holds less than VENV_FREE_GIB, rather than pip failing with
# "No space left on device" half-way; and it keeps no second copy of the wheels in pip's cache.
VENV_FREE_GIB ?= 8
$(VENV)/.installed: pyproject.toml constraints.txt
	@$(PYTHON) -c 'import shutil, sys; free = shutil.disk_usage(".").free / 2**30; need = float("$(VENV_FREE_GIB)"); sys.exit(0 if free >= need else f"make: .venv needs about {need:g} GiB free on this disk (torch with its CUDA libraries installs 5.8 GiB); {free:.1f} GiB free")'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --no-cache-dir -c constraints.txt -e ".[infra,trainer,test]"
	touch $@

infra-env: $(INFRA_VENV)/.installed ## create .venv-infra, the Pulumi program's environment (no torch)

# The deploy path (.github/workflows/pulumi-stack.yml): the program's and the policy pack's environments
# from the hash-checked requirements `make lock` writes beside constraints.txt, every file checked
# against its sha256; the project itself without a download (setuptools is among them).
deploy-env: ## the program's and the policy pack's environments from hash-checked requirements (CI deploys)
	$(PYTHON) -m venv $(INFRA_VENV)
	$(INFRA_VENV)/bin/pip install -q --require-hashes --no-deps -r constraints/deploy-infra.txt
	$(INFRA_VENV)/bin/pip install -q --no-deps --no-build-isolation -e .
	touch $(INFRA_VENV)/.installed
	$(PYTHON) -m venv $(POLICY_VENV)
	$(POLICY_VENV)/bin/pip install -q --require-hashes --no-deps -r constraints/deploy-policy.txt
	touch $(POLICY_VENV)/.installed

run: $(VENV)/.installed ## run STACK's training job (default dev) through the local scheduler, no cluster needed
	$(VENV)/bin/python -m infra.local --stack $(STACK)

# Rendering needs the Pulumi program's environment only (no torch): .venv-infra.
render: $(INFRA_VENV)/.installed ## render STACK's objects offline and validate them (build/rendered/)
	$(INFRA_VENV)/bin/python -m infra.review.render --stack $(STACK) --validate

lint: $(VENV)/.installed ## ruff, mypy, the Pulumi.yaml schema check and the component schema's
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m infra.program.schema --check
	$(VENV)/bin/python -m infra.component.schema --check

# The workflows' lint (jactionlint with shellcheck) comes with .venv's test extra: tests/ci runs it.
# The whole suite on every core; pytest lists the 15 slowest tests, and the last line gives the wall
# time of the whole target (set-up included), so growth shows in every CI log.
test: $(POLICY_VENV)/.installed ## lint and the whole test suite
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lint && $(KEEP_BYTECODE) $(VENV)/bin/python -m pytest $(XDIST); code=$$?; \
	echo "make test: exit $$code after $$(( $$(date +%s) - start )) s (set-up, lint and the whole suite)"; \
	exit $$code

# The edit loop: config, rendering, effective pods, admission, policy, docs and the trainer's unit tests;
# every test that starts a real process (trainer, torchrun, S3 or model server, a local run), or any of
# the project's own code in a process, is marked `slow` and left to `make test` (tests/processguard.py
# fails a quick test that starts the project's code).
test-fast: $(VENV)/.installed ## the quick tests only: none starts the trainer, a server or any of the project's code in a process
	@start=$$(date +%s); \
	$(KEEP_BYTECODE) $(VENV)/bin/python -m pytest $(XDIST) -m "not slow"; code=$$?; \
	echo "make test-fast: exit $$code after $$(( $$(date +%s) - start )) s"; \
	exit $$code

# The real-server tier of MLflow logging (tests/trainer/test_mlflow_server.py): a tracking server in its
# own environment, .venv-mlflow (about 850 MB with the server's dependencies, so never in .venv or the
# image; its protobuf 7 would not meet kserve's pin either), at the versions constraints/mlflow-server.txt
# records. `make test-mlflow` runs the tier; `make test` never collects it (marker `mlflow_server`).
MLFLOW_SERVER_VERSION := 3.17.2
MLFLOW_VENV := .venv-mlflow

$(MLFLOW_VENV)/.installed: constraints/mlflow-server.txt
	$(PYTHON) -m venv $(MLFLOW_VENV)
	$(MLFLOW_VENV)/bin/pip install -q -c constraints/mlflow-server.txt "mlflow==$(MLFLOW_SERVER_VERSION)"
	touch $@

mlflow-server-env: $(MLFLOW_VENV)/.installed ## create .venv-mlflow, a local MLflow tracking server's environment
test-mlflow: $(VENV)/.installed $(MLFLOW_VENV)/.installed ## the MLflow tests against a real tracking server
	$(VENV)/bin/python -m pytest -m mlflow_server tests/trainer

# The cluster tier (tests/e2e): needs the Pulumi CLI, docker, and kind or E2E_IMAGE_REGISTRY, against
# the current kubeconfig context; stops at once with one line (exit 4) without them. Never part of `test`.
e2e: $(VENV)/.installed $(INFRA_VENV)/.installed ## the cluster tier against the current kubeconfig context (kind or a registry)
	mkdir -p build/e2e
	$(VENV)/bin/python -m pytest -m e2e tests/e2e -s -v -p no:cacheprovider --junitxml=build/e2e/junit.xml

# The local cluster tier: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK, the
# training operator, the Pulumi CLI and the Kubernetes provider, each built from its pinned wrapper Go
# module (infra/localcluster/parts/) into ~/.cache/ddp-mnist (rebuilt only when a pin changes),
# run on 127.0.0.1. Needs Go >= 1.26, kubectl and openssl; never part of `run` or `test`.
cluster-build: $(VENV)/.installed ## build the local cluster's parts from their pinned Go modules
	$(VENV)/bin/python -m infra.localcluster.build

cluster-up: $(VENV)/.installed $(INFRA_VENV)/.installed ## start the local cluster (control plane, KWOK nodes, operators) on 127.0.0.1
	$(VENV)/bin/python -m infra.localcluster up

cluster-down: $(VENV)/.installed ## stop the local cluster and remove its state
	$(VENV)/bin/python -m infra.localcluster down

# A real preview and up of STACK (a stack of stacks/, or the path of a Pulumi.<name>.yaml of yours) against
# the running local cluster (`make cluster-up` first); extra arguments in REHEARSE_ARGS (e.g. `--set
# minioAccessKey=KEY --set minioSecretKey=SECRET`).
rehearse: $(VENV)/.installed $(INFRA_VENV)/.installed ## a real preview and up of STACK against the running local cluster
	$(VENV)/bin/python -m infra.localcluster.rehearse --stack $(STACK) --up $(REHEARSE_ARGS)

# The tests/e2e_local scenarios through the Automation API with the real CLI and a file backend, against a
# cluster of their own (started and stopped by the tier); the last line gives the target's wall time.
e2e-local: $(VENV)/.installed $(INFRA_VENV)/.installed $(POLICY_VENV)/.installed ## the local cluster tier's scenarios, on a cluster of their own
	@start=$$(date +%s); mkdir -p build/e2e-local; \
	$(VENV)/bin/python -m pytest -m e2e_local tests/e2e_local -v -p no:cacheprovider \
		--junitxml=build/e2e-local/junit.xml; code=$$?; \
	echo "make e2e-local: exit $$code after $$(( $$(date +%s) - start )) s"; \
	exit $$code

# The real node (infra/localcluster/node): a kubelet and kube-proxy at the control plane's pin
# with containerd, runc and the CNI plugins from Debian's packages (installed when missing), joined to
# the running local cluster; its images (pause, CoreDNS, the trainer from our Dockerfile on a Debian
# base) are built here once and loaded into its containerd. As root; `make cluster-down` stops it too.
node-up: $(VENV)/.installed ## join a real kubelet node to the running local cluster (as root)
	$(VENV)/bin/python -m infra.localcluster.node up

# The real node tier (tests/e2e_node): a cluster of its own with the real node, our pods in containers;
# teardown checks that nothing is left on the machine. As root; never part of `run` or `test`.
e2e-node: $(VENV)/.installed $(INFRA_VENV)/.installed $(POLICY_VENV)/.installed ## the real node tier's scenarios (as root), on a cluster of their own
	@start=$$(date +%s); mkdir -p build/e2e-node; \
	$(VENV)/bin/python -m pytest -m e2e_node tests/e2e_node -v -p no:cacheprovider \
		--junitxml=build/e2e-node/junit.xml; code=$$?; \
	echo "make e2e-node: exit $$code after $$(( $$(date +%s) - start )) s"; \
	exit $$code

# The trainer image from Dockerfile, for linux/amd64 (docs/RELEASE.md; a release tag builds, signs and
# publishes it in CI). `make image`: loaded into the local docker as IMAGE. `make image-push
# REGISTRY=registry.example.com/team`: pushed as $(REGISTRY)/$(IMAGE) with SBOM and provenance
# attestations; the last line is the pushed reference by digest, the value for `jobImage`. Both need
# docker with its buildx plugin and stop with one line without them (release/image.py exits 4, which
# make reports as "Error 4").
IMAGE ?= ddp-mnist/trainer:dev
REGISTRY ?=

image: ## build the trainer image into the local docker as IMAGE
	$(PYTHON) release/image.py build $(IMAGE)

image-push: ## build and push the trainer image to REGISTRY with SBOM and provenance
	$(PYTHON) release/image.py push "$(REGISTRY)" $(IMAGE)

golden: $(VENV)/.installed ## rewrite the rendered goldens in tests/golden/
	UPDATE_GOLDEN=1 $(VENV)/bin/python -m pytest tests/infra/test_stacks.py -q

# The platform's upstream manifests (the training operator, Kubeflow Trainer v2 with JobSet, KServe),
# vendored in infra/manifests from the pinned Go modules of infra/localcluster/parts/ with their
# sha256 in infra/manifests/index.yaml. After raising a pin: `make manifests`, review the diff, then
# `make golden`. `make manifests-check` compares without writing (exit 1 on a difference). Needs Go and
# kubectl; never part of `test`, which checks the recorded sums.
manifests: $(VENV)/.installed ## re-vendor the upstream manifests in infra/manifests from their pinned modules
	$(VENV)/bin/python -m infra.localcluster.manifests

manifests-check: $(VENV)/.installed ## compare the vendored manifests with their pinned modules, writing nothing
	$(VENV)/bin/python -m infra.localcluster.manifests --check

# The documentation site (mkdocs.yml, docs/): built into site/ with --strict, as tests/docs/test_site.py
# builds it in `make test`; `make docs-serve` serves it on 127.0.0.1:8000 with live reload.
docs: $(VENV)/.installed ## build the documentation site into site/ (mkdocs build --strict)
	$(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: $(VENV)/.installed ## serve the documentation site on 127.0.0.1:8000 with live reload
	$(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

schema: $(VENV)/.installed ## write Pulumi.yaml's config schema and the component package's schema from the settings model
	$(VENV)/bin/python -m infra.program.schema
	$(VENV)/bin/python -m infra.component.schema

reference: $(VENV)/.installed ## write docs/reference/*.md from the code (--check in the tests)
	$(VENV)/bin/python -m infra.reference

# After changing a pin in pyproject.toml or policy/requirements.txt (or to take newer transitive
# dependencies): re-resolve the whole closure from the package index into constraints.txt.
lock: ## re-resolve constraints.txt from pyproject.toml's pins
	$(PYTHON) constraints/lock.py

clean: ## remove the virtual environments and build outputs
	rm -rf $(VENV) $(INFRA_VENV) $(MLFLOW_VENV) build .pytest_cache .ruff_cache
