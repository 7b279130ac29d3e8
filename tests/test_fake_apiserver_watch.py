"""The fake API server's watches, selectors and Table answers, driven through the official client's
``watch.Watch().stream`` (and kubectl, when installed)."""

from __future__ import annotations

import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3
from kubernetes import client, config, watch

from demo.control_plane import kubectl_path
from demo.fake_apiserver import FakeApiServer, FakeCluster
from demo.fake_tables import human_duration

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"


def pod(ns: str, name: str, node: str = "node-a", labels: dict[str, str] | None = None, phase: str = "Running",
        claims: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": ns, "name": name, "uid": f"uid-{ns}-{name}", "labels": labels or {},
            "creationTimestamp": "2026-03-01T11:00:00Z",
        },
        "spec": spec,
        "status": {
            "phase": phase,
            "podIP": "10.0.0.7",
            "containerStatuses": [
                {"name": "main", "image": "busybox", "imageID": "", "ready": phase == "Running", "restartCount": 2,
                 "state": {"running": {}} if phase == "Running" else {"waiting": {"reason": "ContainerCreating"}}},
            ],
        },
    }


def node(name: str, ready: str = "True") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": "2026-02-20T12:00:00Z",
                     "labels": {"node-role.kubernetes.io/gpu": ""}},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "addresses": [{"type": "InternalIP", "address": "192.168.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.36.1", "osImage": "Ubuntu", "kernelVersion": "6.8",
                         "containerRuntimeVersion": "containerd://2.0", "architecture": "amd64", "bootID": "b",
                         "kubeProxyVersion": "", "machineID": "m", "operatingSystem": "linux", "systemUUID": "s"},
        },
    }


def claim(ns: str, name: str, allocated: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{ns}-{name}", "creationTimestamp": "2026-03-01T11:58:00Z"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    }
    if allocated:
        obj["status"] = {"allocation": {"devices": {"results": []}}, "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
    return obj


def stages() -> list[list[dict[str, Any]]]:
    s0 = [node("node-a"), node("node-b"), pod("team-a", "train", labels={"app": "train", "env": "prod"}),
          pod("team-a", "web", labels={"app": "web"}), pod("team-b", "train", node="node-b", labels={"app": "train"}),
          claim("team-a", "train-gpu")]
    # team-a/train moves to node-b and changes phase, team-a/web is deleted, team-b/notebook appears,
    # node-b turns NotReady, the claim is allocated
    s1 = [node("node-a"), node("node-b", ready="False"),
          pod("team-a", "train", node="node-b", labels={"app": "train", "env": "prod"}, phase="Pending"),
          pod("team-b", "train", node="node-b", labels={"app": "train"}),
          pod("team-b", "notebook", labels={"app": "notebook", "env": "dev"}), claim("team-a", "train-gpu", allocated=True)]
    return [s0, s1]


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster(stages())


def serve(cluster: FakeCluster, tmp_path: Path, **kwargs: Any) -> tuple[FakeApiServer, client.ApiClient]:
    server = FakeApiServer(cluster, clock=lambda: NOW, **kwargs)
    server.start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(tmp_path / "kubeconfig"), client_configuration=cfg)
    cfg.retries = False
    return server, client.ApiClient(cfg)


@pytest.fixture
def served(cluster: FakeCluster, tmp_path: Path) -> Any:
    server, api = serve(cluster, tmp_path, bookmark_interval=0.2)
    try:
        yield server, api
    finally:
        api.close()
        server.stop()


def events(stream: Any) -> list[tuple[str, str, str]]:
    """(type, name or '', resourceVersion) of each event, from raw objects."""
    out = []
    for event in stream:
        raw = event["raw_object"] if "raw_object" in event else event["object"]
        meta = raw.get("metadata", {})
        out.append((event["type"], meta.get("name", ""), meta.get("resourceVersion", "")))
    return out


# --------------------------------------------------------------------------- watch from a list's resourceVersion


def test_list_then_watch_sees_every_change_with_growing_resource_versions(served: Any, cluster: FakeCluster) -> None:
    server, api = served
    core = client.CoreV1Api(api)
    listed = core.list_pod_for_all_namespaces()
    rv = listed.metadata.resource_version
    assert {p.metadata.resource_version for p in listed.items} <= {str(i) for i in range(1, int(rv) + 1)}
    cluster.advance()
    w = watch.Watch()
    seen = []
    for event in w.stream(core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=1):
        seen.append((event["type"], event["object"].metadata.namespace, event["object"].metadata.name,
                     int(event["object"].metadata.resource_version)))
    assert [s[:3] for s in seen] == [
        ("DELETED", "team-a", "web"),
        ("MODIFIED", "team-a", "train"),
        ("ADDED", "team-b", "notebook"),
    ]
    versions = [s[3] for s in seen]
    assert versions == sorted(versions) and versions[0] > int(rv)
    assert max(versions) <= int(cluster.resource_version)
    # the Watch remembered where it got to, as a reconnect would resume from
    assert int(w.resource_version) == max(versions)
    # a list now shows the objects at the resourceVersions the watch announced
    pods = {p.metadata.name: p.metadata.resource_version for p in core.list_namespaced_pod("team-a").items}
    assert pods == {"train": str(versions[1])}


def test_a_change_while_watching_arrives_promptly(served: Any, cluster: FakeCluster) -> None:
    server, api = served
    core = client.CoreV1Api(api)
    rv = core.list_node().metadata.resource_version
    threading.Timer(0.3, cluster.advance).start()
    started = time.monotonic()
    w = watch.Watch()
    for event in w.stream(core.list_node, resource_version=rv, timeout_seconds=10):
        assert (event["type"], event["object"].metadata.name) == ("MODIFIED", "node-b")
        assert event["object"].status.conditions[0].status == "False"
        w.stop()
    assert time.monotonic() - started < 5


def test_watch_without_resource_version_starts_with_the_current_objects(served: Any) -> None:
    _, api = served
    seen = events(watch.Watch().stream(client.CoreV1Api(api).list_node, timeout_seconds=1))
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "node-a"), ("ADDED", "node-b")]


def test_namespaced_watch_and_cluster_scoped_resource(served: Any, cluster: FakeCluster) -> None:
    _, api = served
    core, dra = client.CoreV1Api(api), client.ResourceV1Api(api)
    rv = core.list_namespaced_pod("team-b").metadata.resource_version
    claims_rv = dra.list_resource_claim_for_all_namespaces().metadata.resource_version
    cluster.advance()
    seen = events(watch.Watch().stream(core.list_namespaced_pod, "team-b", resource_version=rv, timeout_seconds=1))
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "notebook")]
    # (the client's generated list names its items V1ResourceClaim, a model it does not have)
    claims = list(watch.Watch(return_type="ResourceV1ResourceClaim").stream(
        dra.list_resource_claim_for_all_namespaces, resource_version=claims_rv, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in claims] == [("MODIFIED", "train-gpu")]
    assert claims[0]["object"].status.reserved_for[0].uid == "u"


# --------------------------------------------------------------------------- bookmarks, timeouts, drops


def test_bookmarks_carry_the_current_resource_version(served: Any, cluster: FakeCluster) -> None:
    _, api = served
    core = client.CoreV1Api(api)
    rv = core.list_node().metadata.resource_version
    started = time.monotonic()
    seen = events(watch.Watch().stream(core.list_node, resource_version=rv, allow_watch_bookmarks=True,
                                       timeout_seconds=1))
    elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 4  # timeoutSeconds ends it, server-side
    assert len(seen) >= 3 and {t for t, _, _ in seen} == {"BOOKMARK"}
    assert {v for _, _, v in seen} == {cluster.resource_version}
    # without allowWatchBookmarks, none
    assert events(watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=1)) == []


def test_a_dropped_watch_resumes_from_the_last_resource_version(served: Any, cluster: FakeCluster) -> None:
    server, api = served
    core = client.CoreV1Api(api)
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    got: list[Any] = []
    failure: list[BaseException] = []

    def consume() -> None:
        try:
            for line in _raw_watch(api, "/api/v1/pods", [("resourceVersion", rv), ("allowWatchBookmarks", "true")]):
                got.append(line)
        except (urllib3.exceptions.ProtocolError, OSError) as exc:
            failure.append(exc)

    reader = threading.Thread(target=consume)
    reader.start()
    _wait_for(lambda: server.watch_count == 1)
    assert server.drop_watches() == 1
    reader.join(5)
    assert not reader.is_alive() and failure, "the client saw the connection break"
    cluster.advance()  # changes while nobody watched
    last = max([int(e["object"]["metadata"]["resourceVersion"]) for e in got] or [int(rv)])
    resumed = events(watch.Watch().stream(core.list_pod_for_all_namespaces, resource_version=str(last),
                                          timeout_seconds=1))
    assert [(t, n) for t, n, _ in resumed] == [("DELETED", "web"), ("MODIFIED", "train"), ("ADDED", "notebook")]


def _raw_watch(api: client.ApiClient, path: str, query: list[tuple[str, str]], timeout: float = 10) -> Any:
    method, url, headers, _, _ = api.param_serialize("GET", path, query_params=[("watch", "1"), *query],
                                                     auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers, _request_timeout=(2, timeout))
    try:
        for line in watch.watch.iter_resp_lines(response.response):
            if line:
                yield orjson.loads(line)
    finally:
        response.response.release_conn()


def _wait_for(condition: Any, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# --------------------------------------------------------------------------- 410 Gone


def test_a_compacted_resource_version_is_gone_as_an_error_event(served: Any, cluster: FakeCluster) -> None:
    _, api = served
    core = client.CoreV1Api(api)
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    cluster.advance()
    cluster.compact()
    raw = list(_raw_watch(api, "/api/v1/pods", [("resourceVersion", rv)]))
    assert len(raw) == 1 and raw[0]["type"] == "ERROR"
    status = raw[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {rv} (")
    # the official client turns it into an ApiException 410 (no retry: timeout_seconds was given)
    with pytest.raises(client.ApiException) as err:
        list(watch.Watch().stream(core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=1))
    assert err.value.status == 410
    # from the current resourceVersion a watch works again
    fresh = core.list_pod_for_all_namespaces().metadata.resource_version
    assert events(watch.Watch().stream(core.list_pod_for_all_namespaces, resource_version=fresh, timeout_seconds=1)) == []


def test_a_resource_version_older_than_the_window_is_gone(tmp_path: Path) -> None:
    cluster = FakeCluster([[node(f"n{i}") for i in range(5)], [node(f"n{i}", "False") for i in range(5)]], window=3)
    server, api = serve(cluster, tmp_path, expired_watch="http")
    try:
        core = client.CoreV1Api(api)
        rv = core.list_node().metadata.resource_version
        cluster.advance()  # five changes: the window keeps three
        with pytest.raises(client.ApiException) as err:
            list(watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=1))
        assert err.value.status == 410 and "too old resource version" in err.value.body
        kept = events(watch.Watch().stream(core.list_node, resource_version=str(int(rv) + 2), timeout_seconds=1))
        assert [n for _, n, _ in kept] == ["n2", "n3", "n4"]
    finally:
        api.close()
        server.stop()


# --------------------------------------------------------------------------- streaming initial list


def test_send_initial_events_then_an_annotated_bookmark(served: Any, cluster: FakeCluster) -> None:
    _, api = served
    core = client.CoreV1Api(api)
    w = watch.Watch()
    seen: list[Any] = []
    for event in w.stream(core.list_pod_for_all_namespaces, send_initial_events=True,
                          resource_version_match="NotOlderThan", allow_watch_bookmarks=True, timeout_seconds=5):
        seen.append(event)
        if event["type"] == "BOOKMARK" and event["raw_object"]["metadata"].get("annotations"):
            cluster.advance()
        if event["type"] == "ADDED" and event["object"].metadata.name == "notebook":
            w.stop()
    kinds = [(e["type"], e["raw_object"]["metadata"].get("name")) for e in seen]
    assert kinds[:4] == [("ADDED", "train"), ("ADDED", "web"), ("ADDED", "train"), ("BOOKMARK", None)]
    end = seen[3]["raw_object"]["metadata"]
    assert end["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert [k for k in kinds[4:] if k[0] != "BOOKMARK"] == [("DELETED", "web"), ("MODIFIED", "train"),
                                                             ("ADDED", "notebook")]


def test_send_initial_events_is_validated_and_refused_without_watch_list(served: Any, tmp_path: Path) -> None:
    _, api = served
    core = client.CoreV1Api(api)
    for kwargs in ({"send_initial_events": True, "allow_watch_bookmarks": True},
                   {"send_initial_events": True, "resource_version_match": "NotOlderThan"},
                   {"resource_version_match": "NotOlderThan"}):
        with pytest.raises(client.ApiException) as err:
            list(watch.Watch().stream(core.list_node, timeout_seconds=1, **kwargs))
        assert err.value.status == 422, kwargs
    old_server, old_api = serve(FakeCluster(stages()), tmp_path / "old", watch_list=False)
    try:
        with pytest.raises(client.ApiException) as err:
            list(watch.Watch().stream(client.CoreV1Api(old_api).list_node, send_initial_events=True,
                                      resource_version_match="NotOlderThan", allow_watch_bookmarks=True,
                                      timeout_seconds=1))
        assert err.value.status == 422 and "WatchList" in err.value.body
    finally:
        old_api.close()
        old_server.stop()


# --------------------------------------------------------------------------- selectors


def test_field_and_label_selectors_on_lists(served: Any) -> None:
    _, api = served
    core = client.CoreV1Api(api)

    def names(**kwargs: Any) -> list[str]:
        return [f"{p.metadata.namespace}/{p.metadata.name}" for p in core.list_pod_for_all_namespaces(**kwargs).items]

    assert names(field_selector="spec.nodeName=node-b") == ["team-b/train"]
    assert names(field_selector="metadata.namespace==team-a,spec.nodeName!=node-b") == ["team-a/train", "team-a/web"]
    assert names(field_selector="metadata.name=web") == ["team-a/web"]
    assert names(field_selector="status.phase=Running") == ["team-a/train", "team-a/web", "team-b/train"]
    assert names(label_selector="app=train") == ["team-a/train", "team-b/train"]
    assert names(label_selector="app in (web, notebook)") == ["team-a/web"]
    assert names(label_selector="app=train,!env") == ["team-b/train"]
    assert names(label_selector="env notin (prod)") == ["team-a/web", "team-b/train"]
    assert names(label_selector="env") == ["team-a/train"]
    assert [n.metadata.name for n in core.list_node(field_selector="metadata.name=node-b").items] == ["node-b"]
    with pytest.raises(client.ApiException) as err:
        core.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert err.value.status == 400 and "field label not supported: spec.bogus" in err.value.body
    with pytest.raises(client.ApiException) as err:
        core.list_node(field_selector="metadata.namespace=x")  # cluster-scoped: no namespace field
    assert err.value.status == 400


def test_a_watch_with_a_field_selector_sees_objects_leave_and_enter_it(served: Any, cluster: FakeCluster) -> None:
    _, api = served
    core = client.CoreV1Api(api)
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    cluster.advance()  # team-a/train moves from node-a to node-b; team-b/notebook lands on node-a

    def watched(selector: str) -> list[tuple[str, str]]:
        stream = watch.Watch().stream(core.list_pod_for_all_namespaces, field_selector=selector, resource_version=rv,
                                      timeout_seconds=1)
        return [(e["type"], f"{e['object'].metadata.namespace}/{e['object'].metadata.name}") for e in stream]

    assert watched("spec.nodeName=node-a") == [("DELETED", "team-a/web"), ("DELETED", "team-a/train"),
                                               ("ADDED", "team-b/notebook")]
    assert watched("spec.nodeName=node-b") == [("ADDED", "team-a/train")]
    assert watched("metadata.namespace=team-b") == [("ADDED", "team-b/notebook")]
    labelled = watch.Watch().stream(core.list_pod_for_all_namespaces, label_selector="env", resource_version=rv,
                                    timeout_seconds=1)
    assert [(e["type"], e["object"].metadata.name) for e in labelled] == [("MODIFIED", "train"), ("ADDED", "notebook")]


# --------------------------------------------------------------------------- Table


def _table(api: client.ApiClient, path: str, query: list[tuple[str, Any]] | None = None) -> dict[str, Any]:
    method, url, headers, _, _ = api.param_serialize("GET", path, query_params=query or [],
                                                     header_params={"Accept": TABLE}, auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers, _request_timeout=(2, 5))
    assert response.status == 200
    return orjson.loads(response.read())


def test_tables_have_each_kinds_columns(served: Any) -> None:
    _, api = served
    pods = _table(api, "/api/v1/namespaces/team-a/pods")
    assert pods["kind"] == "Table" and pods["apiVersion"] == "meta.k8s.io/v1"
    columns = [c["name"] for c in pods["columnDefinitions"] if c["priority"] == 0]
    assert columns == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert [r["cells"][:5] for r in pods["rows"]] == [["train", "1/1", "Running", "2", "60m"],
                                                      ["web", "1/1", "Running", "2", "60m"]]
    assert pods["rows"][0]["cells"][5:7] == ["10.0.0.7", "node-a"]
    assert pods["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert pods["rows"][0]["object"]["metadata"]["uid"] == "uid-team-a-train"
    nodes = _table(api, "/api/v1/nodes")
    assert [c["name"] for c in nodes["columnDefinitions"]][:5] == ["Name", "Status", "Roles", "Age", "Version"]
    assert nodes["rows"][0]["cells"][:5] == ["node-a", "Ready", "gpu", "9d", "v1.36.1"]
    claims = _table(api, "/apis/resource.k8s.io/v1/resourceclaims", [("includeObject", "Object")])
    assert [c["name"] for c in claims["columnDefinitions"]] == ["Name", "State", "Age"]
    assert claims["rows"][0]["cells"] == ["train-gpu", "pending", "2m"]
    assert claims["rows"][0]["object"]["kind"] == "ResourceClaim"
    paged = _table(api, "/api/v1/pods", [("limit", 2)])
    assert len(paged["rows"]) == 2 and paged["metadata"]["continue"]


def test_human_durations_match_kubectl() -> None:
    assert [human_duration(s) for s in (5, 119, 125, 600, 3 * 3600 + 60, 9 * 3600, 50 * 3600, 9 * 86400,
                                        800 * 86400)] == ["5s", "119s", "2m5s", "10m", "3h1m", "9h", "2d2h", "9d",
                                                           "2y70d"]


@pytest.mark.skipif(kubectl_path() is None, reason="no kubectl (scripts/build-control-plane builds one)")
def test_kubectl_get_prints_the_columns(cluster: FakeCluster, tmp_path: Path) -> None:
    # kubectl sends no bearer token over plain HTTP: this server asks for none
    server, api = serve(cluster, tmp_path, token=None)
    api.close()
    try:
        _kubectl_checks(server, cluster)
    finally:
        server.stop()


def _kubectl_checks(server: FakeApiServer, cluster: FakeCluster) -> None:
    out = _kubectl(server, "get", "pods", "-A")
    header = out.splitlines()[0].split()
    assert header == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert "team-b" in out and "train" in out
    wide = _kubectl(server, "get", "nodes", "-o", "wide")
    assert wide.splitlines()[0].split()[:6] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"]
    claims = _kubectl(server, "get", "resourceclaims", "-n", "team-a")
    assert claims.splitlines()[1].split()[:2] == ["train-gpu", "pending"]


def _kubectl(server: FakeApiServer, *args: str, timeout: float = 30) -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kubeconfig"
        server.write_kubeconfig(path)
        out = subprocess.run([str(kubectl_path()), "--kubeconfig", str(path), *args], capture_output=True, text=True,
                             timeout=timeout, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout
    # kubectl get -w: the list, then the watch's events as Table rows
    threading.Timer(1.0, cluster.advance).start()
    with pytest.raises(subprocess.TimeoutExpired) as running:
        _kubectl(server, "get", "pods", "-A", "-w", timeout=4)
    lines = [line.split() for line in (running.value.stdout or b"").decode().splitlines()]
    assert lines[0] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [row[:4] for row in lines[4:]] == [["team-a", "web", "1/1", "Running"],
                                             ["team-a", "train", "0/1", "ContainerCreating"],
                                             ["team-b", "notebook", "1/1", "Running"]]
