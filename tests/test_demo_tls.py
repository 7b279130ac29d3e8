"""The demo's API server over TLS: its kubeconfig carries its own CA, the official client verifies it (no
insecure skip), and kubectl works with it as ``scripts/demo`` prints (kubectl sends no bearer token over
plain HTTP, so the demo serves HTTPS)."""

from __future__ import annotations

import base64
import os
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from collector.kube import ClusterReader, api_client_for
from collector.sources import ClusterSource
from demo.control_plane import kubectl_path
from demo.fake_apiserver import FakeApiServer, FakeCluster
from demo.pki import serving_pki
from demo.source import demo_kubeconfig, published_kubeconfig

DRIVER = "gpu.example.com"
ROOT = Path(__file__).resolve().parents[1]


def stage(claim_state: str) -> list[dict[str, Any]]:
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"namespace": "team-a", "name": "train-gpu", "uid": "uid-claim",
                     "creationTimestamp": "2026-03-01T11:00:00Z"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
    }
    if claim_state == "allocated":
        claim["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0"}]}}}
    return [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "node-a", "uid": "uid-node-a", "labels": {"stage": claim_state}}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER, "uid": "uid-c"}},
        claim,
    ]


@pytest.fixture
def tls_server(tmp_path: Path) -> Any:
    server = FakeApiServer(FakeCluster([stage("pending"), stage("allocated")]), tls=serving_pki("test-apiserver"))
    server.start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    try:
        yield server, tmp_path / "kubeconfig"
    finally:
        server.stop()


def test_the_kubeconfig_names_https_and_carries_the_ca(tls_server: Any) -> None:
    server, kubeconfig = tls_server
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == server.url and server.url.startswith("https://127.0.0.1:")
    assert "insecure-skip-tls-verify" not in cluster
    assert base64.b64decode(cluster["certificate-authority-data"]) == server.tls.ca_cert
    assert config["users"][0]["user"] == {"token": "fake-token"}


def test_the_collector_reads_and_watches_it_verifying_its_ca(tls_server: Any) -> None:
    server, kubeconfig = tls_server
    api = api_client_for(ClusterSource("tls", "kubeconfig", str(kubeconfig)))
    try:
        assert api.configuration.verify_ssl is True and api.configuration.ssl_ca_cert
        result = ClusterReader(api).read()
        assert not result.problems, result.problems
        assert {(o.kind, o.name) for o in result.objects} >= {("Node", "node-a"), ("ResourceClaim", "train-gpu")}
        # A watch streams over the same TLS connection pool.
        core = client.CoreV1Api(api)
        rv = core.list_node().metadata.resource_version
        server.cluster.advance()
        seen = [
            (event["type"], event["raw_object"]["metadata"]["labels"]["stage"])
            for event in watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=1,
                                              _request_timeout=(2, 5))
        ]
        assert seen == [("MODIFIED", "allocated")]
    finally:
        api.close()


def test_a_client_that_does_not_trust_the_ca_is_refused(tls_server: Any, tmp_path: Path) -> None:
    server, kubeconfig = tls_server
    config = yaml.safe_load(kubeconfig.read_text())
    other = serving_pki("someone-else")
    config["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(other.ca_cert).decode()
    (tmp_path / "wrong-ca").write_text(yaml.safe_dump(config))
    api = api_client_for(ClusterSource("tls", "kubeconfig", str(tmp_path / "wrong-ca")))
    try:
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(api).list_node(_request_timeout=(2, 5))
        assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value.reason), refused.value
    finally:
        api.close()
    # Plain HTTP to the TLS port is refused too, and the server keeps serving.
    with pytest.raises(urllib3.exceptions.HTTPError):
        urllib3.PoolManager(retries=False).request("GET", server.url.replace("https", "http") + "/version",
                                                   timeout=2)
    context = ssl.create_default_context(cadata=server.tls.ca_cert.decode())
    assert urllib3.PoolManager(ssl_context=context).request("GET", server.url + "/version").status == 200


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    found = kubectl_path()
    assert found is not None
    return subprocess.run([str(found), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                          timeout=60, check=False)


needs_kubectl = pytest.mark.skipif(kubectl_path() is None, reason="no kubectl (scripts/build-control-plane builds one)")


@needs_kubectl
def test_kubectl_sends_its_token_over_tls(tls_server: Any) -> None:
    server, kubeconfig = tls_server
    out = kubectl(kubeconfig, "get", "resourceclaims", "-A")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].split() == ["NAMESPACE", "NAME", "STATE", "AGE"]
    assert out.stdout.splitlines()[1].split()[:3] == ["team-a", "train-gpu", "pending"]
    assert any(q for method, path, q in server.requests if path.endswith("/resourceclaims"))


@pytest.mark.django_db
def test_the_demo_publishes_a_kubeconfig_kubectl_can_use(tmp_path: Path) -> None:
    private = Path(demo_kubeconfig("demo"))
    published = published_kubeconfig()
    assert published.is_file() and published != private
    config = yaml.safe_load(published.read_text())
    assert config["clusters"][0]["cluster"]["server"].startswith("https://127.0.0.1:")
    assert config["clusters"][0]["cluster"]["certificate-authority-data"]
    assert config == yaml.safe_load(private.read_text())
    if kubectl_path() is None:
        pytest.skip("no kubectl (scripts/build-control-plane builds one)")
    out = kubectl(published, "get", "resourceclaims", "-A")
    assert out.returncode == 0, out.stderr
    rows = [line.split()[:2] for line in out.stdout.splitlines()[1:]]
    assert ["batch", "report-gpu"] in rows, out.stdout


def test_scripts_demo_prints_a_kubectl_command_that_works(tmp_path: Path) -> None:
    """``scripts/demo ADDR:PORT`` as a first-time user runs it (its own SQLite in a fresh var folder): it says
    where the kubeconfig is, and the kubectl command it prints lists the demo's claims."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CLAIMLINE_CLUSTERS")}
    env["CLAIMLINE_VAR_DIR"] = str(tmp_path / "var")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([str(ROOT / "scripts" / "demo"), f"127.0.0.1:{port}"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip())
            if "kubectl --kubeconfig" in line and "get resourceclaims -A" in line:
                break
        printed = lines[-1].split()
        assert printed[:2] == ["kubectl", "--kubeconfig"], lines
        kubeconfig = Path(printed[2])
        assert kubeconfig == tmp_path / "var" / "demo-kubeconfig"
        assert f"demo: dashboard at http://127.0.0.1:{port}/" in lines
        deadline = time.monotonic() + 120
        while not kubeconfig.exists():
            assert process.poll() is None and time.monotonic() < deadline, lines
            time.sleep(0.2)
        assert not any("WARNING" in line or "setuptools" in line for line in lines), lines
        if kubectl_path() is None:
            pytest.skip("no kubectl (scripts/build-control-plane builds one)")
        out = subprocess.run([str(kubectl_path()), *printed[1:]], capture_output=True, text=True, timeout=60,
                             check=False)
        assert out.returncode == 0, out.stderr
        assert ["batch", "report-gpu"] in [row.split()[:2] for row in out.stdout.splitlines()], out.stdout
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
