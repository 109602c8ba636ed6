"""deploy/kubernetes: every manifest valid against the Kubernetes schemas (offline, with
kubernetes-validate), and the properties the deployment relies on, read from the YAML."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from work_ledger.api.schemas import MAX_WAIT_SECONDS

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
BASE = ROOT / "base"
OVERLAYS = sorted(p.parent for p in (ROOT / "overlays").glob("*/kustomization.yaml"))
# The oldest Kubernetes the manifests are for: native sidecars (1.29) and the preStop
# `sleep` action (1.30).
KUBERNETES = "1.30"
# Kinds that are not Kubernetes' own: no schema in kubernetes-validate.
CUSTOM = {("postgresql.cnpg.io/v1", "Cluster")}


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _patches() -> set[Path]:
    """Files a kustomization names as patches: partial objects, checked once rendered."""
    found = set()
    for kustomization in ROOT.rglob("kustomization.yaml"):
        for patch in _documents(kustomization)[0].get("patches", []):
            found.add((kustomization.parent / patch["path"]).resolve())
    return found


def _manifests() -> list[Path]:
    patches = _patches()
    return sorted(
        p
        for p in ROOT.rglob("*.yaml")
        if p.name != "kustomization.yaml" and p.resolve() not in patches
    )


def _validate(resource: dict[str, Any]) -> None:
    if (resource["apiVersion"], resource["kind"]) in CUSTOM:
        assert resource["metadata"]["name"], resource
        assert resource["spec"], resource
        return
    kubernetes_validate.validate(resource, KUBERNETES, strict=True)


def _base() -> dict[str, dict[str, Any]]:
    """The base's resources by kind, in the order its kustomization applies them."""
    files = _documents(BASE / "kustomization.yaml")[0]["resources"]
    return {d["kind"]: d for name in files for d in _documents(BASE / name)}


def _pod(kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = _base()[kind]["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_manifest_is_valid_kubernetes(path: Path) -> None:
    for resource in _documents(path):
        _validate(resource)


def test_a_broken_manifest_is_caught() -> None:
    """The validation can fail: a misspelt field and a wrong type are refused."""
    deployment = _base()["Deployment"]
    misspelt = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(misspelt)
    wrong = {**deployment, "spec": {**deployment["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(wrong)


def test_the_migration_job_is_applied_before_the_replicas_that_skip_migrating() -> None:
    kustomization = _documents(BASE / "kustomization.yaml")[0]
    assert kustomization["sortOptions"] == {"order": "fifo"}  # the listed order holds
    kinds = list(_base())
    assert kinds.index("Job") < kinds.index("Deployment"), kinds
    job = _pod("Job")["containers"][0]
    assert job["command"] == ["work-ledger", "migrate"]
    serve = _pod("Deployment")["containers"][0]
    assert "--no-migrate" in serve["args"]


def test_the_replicas_probe_drain_and_outlast_the_longest_long_poll() -> None:
    deployment = _base()["Deployment"]
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deployment["spec"]["template"]["spec"]
    serve = pod["containers"][0]
    port = serve["ports"][0]
    assert (port["name"], port["containerPort"]) == ("http", 4001)
    assert serve["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert serve["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    pause = serve["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pause > 0
    assert pod["terminationGracePeriodSeconds"] > pause + MAX_WAIT_SECONDS
    assert serve["resources"]["requests"]["cpu"]
    assert serve["resources"]["limits"]["memory"]


@pytest.mark.parametrize("kind", ["Deployment", "Job"])
def test_the_pods_run_as_non_root_with_nothing_to_escalate(kind: str) -> None:
    pod = _pod(kind)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        url = next(e for e in container["env"] if e["name"] == "WL_DATABASE_URL")
        assert url["valueFrom"]["secretKeyRef"]["name"] == "work-ledger"  # never a value
        mounted = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/tmp", "/var/lib/work-ledger"} <= mounted  # writable with a read-only root


def test_the_service_and_budget_select_the_replicas() -> None:
    resources = _base()
    labels = resources["Deployment"]["spec"]["template"]["metadata"]["labels"]
    selectors = [
        resources["Service"]["spec"]["selector"],
        resources["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        resources["Deployment"]["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert selector.items() <= labels.items(), selector
    assert resources["PodDisruptionBudget"]["spec"]["minAvailable"] >= 1
    assert resources["Service"]["spec"]["ports"][0]["targetPort"] == "http"


def test_no_secret_value_is_in_the_manifests() -> None:
    """Only the example Secret holds values, and they are placeholders."""
    for path in _manifests():
        for resource in _documents(path):
            if resource["kind"] == "Secret":
                assert path.name == "secret.example.yaml"
                assert all("CHANGE-ME" in v for v in resource["stringData"].values())


def _rendered(folder: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed: overlays unrendered")
    done = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d is not None]


@pytest.mark.parametrize("folder", [BASE, *OVERLAYS], ids=lambda p: p.name)
def test_each_kustomization_renders_valid_manifests_job_first(folder: Path) -> None:
    resources = _rendered(folder)
    for resource in resources:
        _validate(resource)
    kinds = [r["kind"] for r in resources]
    assert kinds.index("Job") < kinds.index("Deployment"), kinds
    if folder.name == "cloud-sql":
        for kind in ("Job", "Deployment"):
            pod = next(r for r in resources if r["kind"] == kind)["spec"]["template"]["spec"]
            proxy = pod["initContainers"][0]
            assert proxy["restartPolicy"] == "Always"  # a native sidecar: up before, down after
            assert proxy["securityContext"]["allowPrivilegeEscalation"] is False
    if folder.name == "cloudnative-pg":
        assert kinds[0] == "Cluster"
        for kind in ("Job", "Deployment"):
            pod = next(r for r in resources if r["kind"] == kind)["spec"]["template"]["spec"]
            env = {e["name"]: e for e in pod["containers"][0]["env"]}
            assert env["WL_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
                "name": "work-ledger-db-app",
                "key": "uri",
            }


def test_cloudnative_pg_grants_what_grant_ledger_role_sql_grants() -> None:
    """The Cluster's post-init SQL is deploy/kubernetes/grant-ledger-role.sql's statement
    (tests/db/test_ledger_role_grants.py runs that file)."""

    def statement(text: str) -> str:
        return " ".join(text[text.index("DO $$") :].split())

    cluster = _documents(ROOT / "overlays" / "cloudnative-pg" / "cluster.yaml")[0]
    initdb = cluster["spec"]["bootstrap"]["initdb"]
    (posted,) = initdb["postInitApplicationSQL"]
    assert statement(posted) == statement((ROOT / "grant-ledger-role.sql").read_text())
    assert initdb["owner"] == "work_ledger"
