"""scripts/orchestration/kubernetes/*.yml, the Kubernetes chapter's manifests, validated offline.

No cluster runs them here. Each document is checked the way the API server checks it with
kubectl's default strict field validation, against a fixed schema:

* core kinds (Service, Job, ...) against the Kubernetes 1.33 OpenAPI schemas that the
  ``kubernetes-validate`` package bundles (its ``strict`` variant refuses unknown fields);
* custom resources (PyTorchJob, JobSet, Kueue's ResourceFlavor, ClusterQueue, LocalQueue)
  against the ``openAPIV3Schema`` of the version they name in the published CRD, kept in
  tests/orchestration/crds/ (origin in its README.md), made strict the same way: an object
  schema with ``properties`` and no ``x-kubernetes-preserve-unknown-fields`` gets
  ``additionalProperties: false``.

Then the facts that tie the objects together, which no schema sees: the Service the pods'
subdomain names, pod 0's DNS name as the rendezvous address, the node count and GPUs per node
stated twice, /dev/shm in memory with a limit, and the Kueue chain from the job's queue-name
label to a quota that can hold it. A mutated copy of each manifest (an unknown field, a wrong
type) must fail, so a validator that accepts anything fails these tests.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tools.book import script_usage

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "scripts" / "orchestration" / "kubernetes"
CRDS = Path(__file__).resolve().parent / "crds"
K8S_VERSION = "1.33"
FILES = sorted(p.name for p in MANIFESTS.glob("*.yml"))


def documents(name: str) -> list[dict]:
    with open(MANIFESTS / name, encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> strict openAPIV3Schema, for every served version of every CRD kept."""
    found = {}
    for path in sorted(CRDS.glob("*.yaml")):
        with open(path, encoding="utf-8") as f:
            crd = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version["served"]:
                found[(f"{group}/{version['name']}", kind)] = _strict(version["schema"]["openAPIV3Schema"])
    return found


def _strict(schema):
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def errors(doc: dict) -> list[str]:
    """The schema errors of one document, each as 'path: message' ([] when it is valid)."""
    schema = crd_schemas().get((doc.get("apiVersion"), doc.get("kind")))
    if schema is None:
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            return [f"{'.'.join(map(str, err.path))}: {err.message}"]
        except kubernetes_validate.SchemaNotFoundError:
            return [f"no schema for {doc.get('apiVersion')} {doc.get('kind')}"]
        return []
    found = jsonschema.Draft7Validator(schema).iter_errors(doc)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


# -- the schemas -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FILES)
def test_manifest_is_valid(name):
    docs = documents(name)
    assert docs, f"{name}: no document"
    for doc in docs:
        assert doc["metadata"]["name"], f"{name}: {doc['kind']} has no name"
        assert errors(doc) == [], f"{name}: {doc['kind']} {doc['metadata']['name']}"


def _containers(doc: dict) -> list[dict]:
    return [c for pod in pod_specs(doc) for c in pod["containers"]]


def _mutations(doc: dict):
    """Careless edits a reader makes, each of which the API server refuses."""
    spec = doc.get("spec", {})
    if spec:
        first = next(iter(spec))
        bad = copy.deepcopy(doc)
        typo = first[:-2] + first[-1] + first[-2]  # two letters swapped: clusterPI, nodeLabesl
        bad["spec"][typo] = bad["spec"].pop(first)
        yield f"spec.{typo}", bad
    if _containers(doc):
        bad = copy.deepcopy(doc)
        container = _containers(bad)[0]
        container["resource"] = container.pop("resources")  # 'resource' for 'resources'
        yield "containers[0].resource", bad
        bad = copy.deepcopy(doc)
        _containers(bad)[0]["env"] = {"NCCL_DEBUG": "WARN"}  # env is a list of name/value pairs
        yield "containers[0].env as a mapping", bad


@pytest.mark.parametrize("name", FILES)
def test_a_wrong_field_fails(name):
    tried = 0
    for doc in documents(name):
        for what, bad in _mutations(doc):
            tried += 1
            assert errors(bad), f"{name}: {doc['kind']} with {what} passed validation"
    assert tried, f"{name}: nothing to mutate"


@pytest.mark.parametrize("name", FILES)
def test_header_gives_the_launch_line(name):
    # the Scripts appendix shows it (tools/book.py recognises `kubectl apply|create -...`)
    usage = script_usage(MANIFESTS / name)
    assert usage.startswith("kubectl apply ") and usage.endswith(f" -f scripts/orchestration/kubernetes/{name}")


def test_crd_origins_are_recorded():
    readme = (CRDS / "README.md").read_text(encoding="utf-8")
    kept = sorted(p.name for p in CRDS.glob("*.yaml"))
    assert kept, "no CRD kept"
    for name in kept:
        line = next((line for line in readme.splitlines() if f"`{name}`" in line), "")
        assert re.search(r"\b[0-9a-f]{40}\b", line), f"{name}: no origin commit in crds/README.md"
    kinds = {kind for _, kind in crd_schemas()}
    assert kinds == {"PyTorchJob", "JobSet", "ResourceFlavor", "ClusterQueue", "LocalQueue"}


# -- what ties the objects together ---------------------------------------------------------------
def pod_specs(doc: dict) -> list[dict]:
    """The pod templates' specs of a Job, JobSet or PyTorchJob."""
    spec = doc.get("spec", {})
    if doc["kind"] == "Job":
        return [spec["template"]["spec"]]
    if doc["kind"] == "JobSet":
        return [rj["template"]["spec"]["template"]["spec"] for rj in spec["replicatedJobs"]]
    if doc["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in spec["pytorchReplicaSpecs"].values()]
    return []


def torchrun_options(container: dict) -> dict[str, str]:
    words = container.get("command", []) + container.get("args", [])
    assert words[0] == "torchrun", words
    return dict(w[2:].split("=", 1) for w in words[1:] if w.startswith("--") and "=" in w)


_UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(value) -> float:
    """A Kubernetes quantity ("96", "500m", "64Gi") as a number."""
    number, unit = re.fullmatch(r"([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", str(value)).groups()
    return float(number) / 1000 if unit == "m" else float(number) * _UNITS[unit or ""]


def by_kind(name: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for doc in documents(name):
        found.setdefault(doc["kind"], []).append(doc)
    return found


def test_indexed_job_rendezvous():
    objects = by_kind("torchrun-indexed-job.yml")
    (service,), (job,) = objects["Service"], objects["Job"]
    pod = job["spec"]["template"]["spec"]
    assert service["spec"]["clusterIP"] == "None"  # headless: pods' own DNS records
    assert pod["subdomain"] == service["metadata"]["name"]
    # the Job controller labels its pods batch.kubernetes.io/job-name=<job>: the selector must hit them
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": job["metadata"]["name"]}
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"]  # every node at once
    options = torchrun_options(pod["containers"][0])
    assert int(options["nnodes"]) == job["spec"]["completions"]
    assert options["node-rank"] == "$(JOB_COMPLETION_INDEX)"
    # pod 0's hostname is <job>-0, and the headless Service makes <hostname>.<subdomain> resolvable
    assert options["master-addr"] == f"{job['metadata']['name']}-0.{pod['subdomain']}"


def test_jobset_rendezvous():
    (jobset,) = by_kind("jobset.yml")["JobSet"]
    network = jobset["spec"]["network"]
    assert network["enableDNSHostnames"]
    (rj,) = jobset["spec"]["replicatedJobs"]
    job = rj["template"]["spec"]
    options = torchrun_options(job["template"]["spec"]["containers"][0])
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"]
    assert int(options["nnodes"]) == rj["replicas"] * job["completions"]
    assert options["node-rank"] == "$(JOB_COMPLETION_INDEX)" and rj["replicas"] == 1
    # JobSet's pod hostnames: <jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>
    assert options["master-addr"] == f"{jobset['metadata']['name']}-{rj['name']}-0-0.{network['subdomain']}"


def test_pytorchjob_shape():
    (ptj,) = by_kind("pytorchjob.yml")["PyTorchJob"]
    replicas = ptj["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1
    for pod in pod_specs(ptj):
        container = pod["containers"][0]
        assert container["name"] == "pytorch"  # the operator sets its variables on this one
        assert container["command"][0] == "torchrun"
        assert int(ptj["spec"]["nprocPerNode"]) == int(container["resources"]["limits"]["nvidia.com/gpu"])


@pytest.mark.parametrize("name", [n for n in FILES if any(pod_specs(d) for d in documents(n))])
def test_every_pod_has_gpus_nccl_and_shared_memory(name):
    for doc in documents(name):
        for pod in pod_specs(doc):
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            for container in pod["containers"]:
                limits = container["resources"]["limits"]
                gpus = int(limits["nvidia.com/gpu"])
                options = torchrun_options(container)
                if "nproc-per-node" in options:  # else the operator's PET_NPROC_PER_NODE (test_pytorchjob_shape)
                    assert int(options["nproc-per-node"]) == gpus
                assert any(e["name"].startswith("NCCL_") for e in container["env"])
                (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
                shm = volumes[mount["name"]]["emptyDir"]
                assert shm["medium"] == "Memory"
                # a memory-backed emptyDir is charged to the container's memory limit
                assert 0 < quantity(shm["sizeLimit"]) < quantity(limits["memory"])


def test_kueue_chain_admits_the_jobset():
    queues = by_kind("kueue-queues.yml")
    (jobset,) = by_kind("jobset.yml")["JobSet"]
    (local,), (cluster,) = queues["LocalQueue"], queues["ClusterQueue"]
    flavors = {f["metadata"]["name"]: f for f in queues["ResourceFlavor"]}
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == local["metadata"]["name"]
    assert local["spec"]["clusterQueue"] == cluster["metadata"]["name"]
    # what the JobSet asks for, all pods together: Kueue admits the whole workload or nothing
    wanted: dict[str, float] = {}
    for rj in jobset["spec"]["replicatedJobs"]:
        job = rj["template"]["spec"]
        pods = rj["replicas"] * job["parallelism"]
        for container in job["template"]["spec"]["containers"]:
            resources = {**container["resources"].get("limits", {}), **container["resources"].get("requests", {})}
            for resource, value in resources.items():
                wanted[resource] = wanted.get(resource, 0) + pods * quantity(value)
    (group,) = cluster["spec"]["resourceGroups"]
    assert set(wanted) <= set(group["coveredResources"]), "a resource no quota covers is never admitted"
    fits = []
    for flavor in group["flavors"]:
        assert flavor["name"] in flavors
        quota = {r["name"]: quantity(r["nominalQuota"]) for r in flavor["resources"]}
        node_labels = flavors[flavor["name"]]["spec"].get("nodeLabels", {})
        selector = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].get("nodeSelector", {})
        # a flavor whose node labels contradict the pods' nodeSelector cannot be assigned to them
        if all(selector.get(k, v) == v for k, v in node_labels.items()):
            fits.append(all(wanted[r] <= quota.get(r, 0) for r in wanted))
    assert any(fits), f"no flavor of {cluster['metadata']['name']} holds {wanted}"
