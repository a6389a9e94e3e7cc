"""The table `python -m infra.review.render` prints: one line of key facts per rendered object, upstream
manifest and effective pod, like a preview."""

from __future__ import annotations

from typing import Any

from infra.review.cluster import ClusterView
from infra.review.manifest import Rendering


def _pod_facts(template: dict[str, Any]) -> str:
    container = template["spec"]["containers"][0]
    limits = container.get("resources", {}).get("limits", {})
    backend = next((a.split("=", 1)[1] for a in container.get("args", []) if a.startswith("--backend=")), "?")
    return f"gpus/node={limits.get('nvidia.com/gpu', 0)} backend={backend} image={container['image']}"


def _ports(rule: dict[str, Any]) -> str:
    ports = [
        f"{p['port']}-{p['endPort']}"
        if "endPort" in p
        else str(p.get("port", f"{p.get('protocol', 'TCP')}:*"))
        for p in rule.get("ports", [])
    ]
    return ",".join(dict.fromkeys(ports)) or "any"


def _network_policy_facts(spec: dict[str, Any]) -> str:
    selector = ",".join(f"{k}={v}" for k, v in spec["podSelector"].get("matchLabels", {}).items())
    ingress = " ".join(f"in:{_ports(r)}" for r in spec.get("ingress", []))
    egress = " ".join(f"out:{_ports(r)}" for r in spec.get("egress", []))
    return f"pods={selector} {ingress} {egress}".strip()


def describe(obj: dict[str, Any]) -> str:
    """The key facts of one object, for the summary table.

    One branch per kind of object: a flat table, clearer whole than split."""
    kind, spec = obj["kind"], obj.get("spec", {})
    if kind == "Namespace":
        return (
            f"pod-security={obj['metadata'].get('labels', {}).get('pod-security.kubernetes.io/enforce', '-')}"
        )
    if kind == "StorageClass":
        return f"provisioner={obj['provisioner']} reclaim={obj.get('reclaimPolicy', 'Delete')}"
    if kind == "PersistentVolumeClaim":
        return (
            f"{','.join(spec['accessModes'])} {spec['resources']['requests']['storage']} "
            f"class={spec.get('storageClassName', '-')}"
        )
    if kind == "Secret":
        return f"keys={','.join(sorted(obj.get('stringData', obj.get('data', {}))))} (values redacted)"
    if kind == "ServiceAccount":
        return f"automountToken={str(obj.get('automountServiceAccountToken', True)).lower()}"
    if kind == "NetworkPolicy":
        return _network_policy_facts(spec)
    if kind == "ResourceQuota":
        return " ".join(f"{k}={v}" for k, v in sorted(spec["hard"].items()))
    if kind == "LimitRange":
        return " ".join(
            f"{item['type'].lower()}.{field}.{k}={v}"
            for item in spec["limits"]
            for field in ("max", "default", "defaultRequest")
            for k, v in sorted(item.get(field, {}).items())
        )
    if kind == "LocalQueue":
        return f"kueue clusterQueue={spec['clusterQueue']}"
    if kind == "Service":
        return f"headless={spec.get('clusterIP') == 'None'} ports={[p['port'] for p in spec['ports']]}"
    if kind == "PodDisruptionBudget":
        return f"minAvailable={spec.get('minAvailable')}"
    if kind == "Deployment":
        rolling = spec.get("strategy", {}).get("rollingUpdate", {})
        container = spec["template"]["spec"]["containers"][0]
        return (
            f"replicas={spec.get('replicas', 1)} maxUnavailable={rolling.get('maxUnavailable')} "
            f"maxSurge={rolling.get('maxSurge')} image={container['image']}"
        )
    if kind == "InferenceService":
        predictor = spec["predictor"]
        mode = obj["metadata"].get("annotations", {}).get("serving.kserve.io/deploymentMode", "-")
        rolling = predictor.get("deploymentStrategy", {}).get("rollingUpdate", {})
        return (
            f"mode={mode} replicas={predictor.get('minReplicas', 1)} "
            f"maxUnavailable={rolling.get('maxUnavailable')} maxSurge={rolling.get('maxSurge')} "
            f"image={predictor['containers'][0]['image']}"
        )
    if kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        policy = spec.get("mlPolicy") or {}
        jobset = spec["template"]["spec"]
        rjobs = ",".join(f"{r['name']}x{r.get('replicas', 1)}" for r in jobset["replicatedJobs"])
        facts = f"{'torch ' if 'torch' in policy else ''}nodes={policy.get('numNodes', 1)} jobs={rjobs}"
        restarts = (jobset.get("failurePolicy") or {}).get("maxRestarts", 0)
        template = jobset["replicatedJobs"][0]["template"]["spec"]["template"]
        return f"{facts} maxRestarts={restarts} {_pod_facts(template)}"
    if kind == "TrainJob":
        trainer, ref = spec.get("trainer") or {}, spec["runtimeRef"]
        return (
            f"runtime={ref.get('kind', 'ClusterTrainingRuntime')}/{ref['name']} "
            f"nodes={trainer.get('numNodes', '-')} procs/node={trainer.get('numProcPerNode', 'auto')}"
        )
    if kind == "PyTorchJob":
        replicas = spec["pytorchReplicaSpecs"]
        nodes = sum(r["replicas"] for r in replicas.values())
        return f"nodes={nodes} procs/node={spec['nprocPerNode']} {_pod_facts(replicas['Master']['template'])}"
    if kind == "Job" and spec.get("completionMode") != "Indexed":
        container = spec["template"]["spec"]["containers"][0]
        return f"runs {' '.join([*container.get('command', []), *container.get('args', [])])}"
    if kind == "Job":
        procs = next(
            (
                e["value"]
                for e in spec["template"]["spec"]["containers"][0].get("env", [])
                if e["name"] == "PET_NPROC_PER_NODE"
            ),
            "?",
        )
        return f"indexed nodes={spec['completions']} procs/node={procs} {_pod_facts(spec['template'])}"
    return ""


def _effective_pod_facts(view: ClusterView) -> list[tuple[str, str, str]]:
    refused = {line.split('"', 2)[1] for line in view.admission.refusals}
    rows = []
    for pod in view.admission.pods:
        init = ",".join(c["name"] for c in pod.spec.get("initContainers", [])) or "-"
        verdict = "REFUSED" if pod.name in refused else f"admitted ({view.level_of(pod)})"
        rows.append(
            (
                "Pod (effective)",
                pod.name,
                f"{pod.owner} {pod.role} node-rank={pod.node_rank} init={init} {verdict}",
            )
        )
    rows += [
        (
            "Service (effective)",
            s["metadata"]["name"],
            f"{s['metadata'].get('labels', {}).get('training.kubeflow.org/job-name', '')}"
            f"{s['spec'].get('selector', {}).get('jobset.sigs.k8s.io/jobset-name', '')} headless",
        )
        for s in view.effective.services
    ]
    return rows


def summary(rendering: Rendering, view: ClusterView) -> str:
    rows = [(o["kind"], o["metadata"]["name"], describe(o)) for o in rendering.objects]
    vendored = {i.registration.name: i for i in rendering.upstream}
    rows += [
        (
            r.type.split(":")[1].split("/")[0],
            r.name,
            f"source={vendored[r.name].vendored.shown} (vendored {vendored[r.name].vendored.version}, "
            f"{len(vendored[r.name].objects)} objects)"
            if r.name in vendored
            else f"source={r.inputs.get('directory') or r.inputs.get('file') or r.inputs.get('chart')}",
        )
        for r in rendering.external
    ]
    rows += _effective_pod_facts(view)
    width = [max(len(r[i]) for r in rows + [("KIND", "NAME", "")]) for i in range(2)]
    lines = [f"{'KIND':<{width[0]}}  {'NAME':<{width[1]}}  DETAILS"]
    lines += [f"{k:<{width[0]}}  {n:<{width[1]}}  {d}" for k, n, d in rows]
    return "\n".join(lines)
