"""The fake API server, driven through the official kubernetes client (v37 API)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3
import yaml
from kubernetes import client, config

from demo.fake_apiserver import EXPIRED_MESSAGE, FakeApiServer, FakeCluster, Fault

ROOT = Path(__file__).resolve().parents[1]
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
DRIVER = "gpu.example.com"


# --------------------------------------------------------------------------- tiny objects


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"uid-{name}"}}


def resource_slice(name: str, node_name: str = "node-a", devices: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def pod(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{ns}-{name}"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def claim(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{ns}-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
    }


def stage0() -> list[dict[str, Any]]:
    # deliberately unsorted: the server must order by (namespace, name)
    return [
        *(resource_slice(f"slice-{c}") for c in "ecadb"),
        node("node-c"),
        node("node-a"),
        node("node-b"),
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER}},
        pod("team-b", "trainer"),
        pod("team-a", "trainer"),
        pod("team-a", "notebook"),
        claim("team-b", "gpu"),
        claim("team-a", "gpu"),
        # ignored: a kind outside the served set, and an old API version of a served kind
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "team-a", "name": "cm"}},
        {**resource_slice("slice-old"), "apiVersion": "resource.k8s.io/v1beta1"},
    ]


def stage1() -> list[dict[str, Any]]:
    return [resource_slice("slice-a"), resource_slice("slice-b"), node("node-a"), pod("team-a", "trainer")]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster([stage0(), stage1()])


@pytest.fixture
def server(cluster):
    with FakeApiServer(cluster) as srv:
        yield srv


@pytest.fixture
def kubeconfig(server, tmp_path) -> Path:
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(path)
    return path


def make_api(kubeconfig: Path, retries: Any = None) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    if retries is not None:
        cfg.retries = retries
    return client.ApiClient(cfg)


@pytest.fixture
def api(kubeconfig):
    # retries off, as the collector configures it: every response reaches the caller
    with make_api(kubeconfig, retries=False) as a:
        yield a


@pytest.fixture
def default_api(kubeconfig):
    # the client's defaults (urllib3 Retry(3)), to pin what they hide
    with make_api(kubeconfig) as a:
        yield a


def get(
    api: client.ApiClient, path: str, query: list[tuple[str, Any]] | None = None, timeout: Any = (2, 5)
) -> tuple[int, Any, bytes]:
    """A raw GET the way the collector does it (kubernetes>=37 call_api)."""
    method, url, headers, _body, _post = api.param_serialize(
        "GET", path, query_params=query or [], auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers, _request_timeout=timeout)
    try:
        return response.status, response.headers, response.read()
    finally:
        response.response.release_conn()


def get_json(api: client.ApiClient, path: str, query: list[tuple[str, Any]] | None = None) -> tuple[int, Any]:
    status, _, data = get(api, path, query)
    return status, orjson.loads(data)


def control(server: FakeApiServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = orjson.dumps(body) if body is not None else None
    req = urllib.request.Request(server.url + path, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, orjson.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, orjson.loads(exc.read())


def names(items: list[dict[str, Any]]) -> list[str]:
    return [i["metadata"]["name"] for i in items]


# --------------------------------------------------------------------------- lists and pagination


def test_pagination_over_five_items_with_limit_two(server, api):
    pages, token = [], None
    while True:
        query: list[tuple[str, Any]] = [("limit", 2)] + ([("continue", token)] if token else [])
        status, body = get_json(api, SLICES, query)
        assert status == 200
        pages.append(body)
        token = body["metadata"].get("continue")
        if not token:
            break

    assert [len(p["items"]) for p in pages] == [2, 2, 1]
    assert [p["metadata"].get("remainingItemCount") for p in pages] == [3, 1, None]
    # one resourceVersion for the whole list: the counter's value (one per object of the first stage)
    assert {p["metadata"]["resourceVersion"] for p in pages} == {server.cluster.resource_version}
    assert all(p["kind"] == "ResourceSliceList" and p["apiVersion"] == "resource.k8s.io/v1" for p in pages)
    items = [i for p in pages for i in p["items"]]
    assert names(items) == ["slice-a", "slice-b", "slice-c", "slice-d", "slice-e"]  # v1beta1 one ignored
    assert all("kind" not in i and "apiVersion" not in i for i in items)
    assert items[0]["spec"]["pool"]["name"] == "node-a"
    assert [q.get("continue") is not None for _, _, q in server.requests] == [False, True, True]


def test_typed_client_models_and_continue(api):
    core = client.CoreV1Api(api)
    first = core.list_node(limit=2)
    assert isinstance(first, client.V1NodeList)
    assert [n.metadata.name for n in first.items] == ["node-a", "node-b"]
    assert first.metadata.remaining_item_count == 1
    rest = core.list_node(limit=2, _continue=first.metadata._continue)
    assert [n.metadata.name for n in rest.items] == ["node-c"] and rest.metadata._continue is None

    slices = client.ResourceV1Api(api).list_resource_slice()
    assert [s.spec.pool.name for s in slices.items] == ["node-a"] * 5
    assert slices.items[0].spec.devices[0].name == "gpu-0"

    pods = core.list_namespaced_pod("team-a")
    assert [p.metadata.name for p in pods.items] == ["notebook", "trainer"]
    all_claims = client.ResourceV1Api(api).list_resource_claim_for_all_namespaces()
    assert [(c.metadata.namespace, c.metadata.name) for c in all_claims.items] == [
        ("team-a", "gpu"),
        ("team-b", "gpu"),
    ]
    one = client.ResourceV1Api(api).read_namespaced_resource_claim("gpu", "team-b")
    assert one.spec.devices.requests[0].exactly.device_class_name == DRIVER

    raw = client.ResourceV1Api(api).list_device_class(_preload_content=False)
    assert orjson.loads(raw.data)["items"][0]["metadata"]["name"] == DRIVER


def test_get_one_namespaced_lists_and_unknown_routes(api):
    status, obj = get_json(api, "/api/v1/namespaces/team-a/pods/trainer")
    assert status == 200 and obj["kind"] == "Pod" and obj["apiVersion"] == "v1"  # get-one keeps kind
    assert obj["metadata"]["uid"] == "uid-team-a-trainer"

    status, body = get_json(api, "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/nope")
    assert status == 404 and body["reason"] == "NotFound" and body["kind"] == "Status"
    assert body["message"] == 'resourceclaims.resource.k8s.io "nope" not found'

    status, body = get_json(api, "/api/v1/namespaces/team-b/pods")
    assert status == 200 and body["kind"] == "PodList" and names(body["items"]) == ["trainer"]
    status, body = get_json(api, "/api/v1/events")
    assert status == 200 and body["items"] == []
    status, body = get_json(api, "/api/v1/configmaps")
    assert status == 404 and body["code"] == 404
    status, body = get_json(api, "/api/v1/namespaces/team-a/nodes")  # nodes are cluster-scoped
    assert status == 404


    status, body = get_json(api, "/version")
    assert body["gitVersion"] == "v1.36.1"
    assert client.VersionApi(api).get_code().git_version == "v1.36.1"
    status, body = get_json(api, "/apis")
    assert body["groups"][0]["preferredVersion"]["groupVersion"] == "resource.k8s.io/v1"
    status, body = get_json(api, "/api")
    assert body["versions"] == ["v1"]
    status, headers, raw = get(api, "/healthz")
    assert raw == b"ok" and headers.getlist("Content-Type") == ["text/plain; charset=utf-8"]


# --------------------------------------------------------------------------- stages and continue tokens


def test_stale_continue_token_after_advance_is_410(server, cluster, api):
    status, body = get_json(api, SLICES, [("limit", 2)])
    token = body["metadata"]["continue"]
    first_rv = body["metadata"]["resourceVersion"]
    assert cluster.advance() is True and cluster.stage == 1

    status, body = get_json(api, SLICES, [("limit", 2), ("continue", token)])
    assert status == 410
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": EXPIRED_MESSAGE,
        "reason": "Expired",
        "code": 410,
    }
    with pytest.raises(client.ApiException) as err:
        client.ResourceV1Api(api).list_resource_slice(limit=2, _continue=token)
    assert err.value.status == 410

    # a fresh list sees the new stage with a newer resourceVersion
    before = int(first_rv)
    status, body = get_json(api, SLICES)
    assert names(body["items"]) == ["slice-a", "slice-b"] and int(body["metadata"]["resourceVersion"]) > before
    assert cluster.advance() is False and cluster.stage == 1


def test_replacing_the_current_stage_expires_tokens(cluster, api):
    _, body = get_json(api, "/api/v1/nodes", [("limit", 1)])
    cluster.replace_stage(0, [node("node-z"), node("node-y")])
    status, _ = get_json(api, "/api/v1/nodes", [("limit", 1), ("continue", body["metadata"]["continue"])])
    assert status == 410
    _, body = get_json(api, "/api/v1/nodes")
    assert names(body["items"]) == ["node-y", "node-z"]
    with pytest.raises(IndexError):
        cluster.set_stage(5)


def test_malformed_or_foreign_continue_token_is_400(api):
    status, body = get_json(api, SLICES, [("limit", 2), ("continue", "not-a-token!")])
    assert status == 400 and body["reason"] == "BadRequest"
    _, nodes = get_json(api, "/api/v1/nodes", [("limit", 1)])
    status, body = get_json(api, SLICES, [("continue", nodes["metadata"]["continue"])])
    assert status == 400 and "different list" in body["message"]


# --------------------------------------------------------------------------- faults


def test_429_with_retry_after(server, api, default_api):
    server.inject(Fault(status=429, retry_after=7, path=SLICES))
    assert get(api, "/api/v1/nodes")[0] == 200  # other paths unaffected
    status, headers, data = get(api, SLICES)
    body = orjson.loads(data)
    assert status == 429 and headers["Retry-After"] == "7"
    assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 7
    assert get(api, SLICES)[0] == 200  # used up after one request
    assert server.faults == []

    # Pinned client behaviour: with default retries urllib3 itself honours Retry-After
    # on 429 and retries, so the caller never sees the 429.
    server.inject(Fault(status=429, retry_after=0, path=SLICES))
    before = len(server.requests)
    assert get(default_api, SLICES)[0] == 200
    assert len(server.requests) - before == 2


def test_500_only_on_continue_requests(server, api):
    server.inject(Fault(status=500, on_continue=True, times=1))
    _, page = get_json(api, SLICES, [("limit", 2)])
    token = page["metadata"]["continue"]
    status, body = get_json(api, SLICES, [("limit", 2), ("continue", token)])
    assert status == 500 and body["reason"] == "InternalError"
    status, body = get_json(api, SLICES, [("limit", 2), ("continue", token)])
    assert status == 200 and names(body["items"]) == ["slice-c", "slice-d"]

    with pytest.raises(client.ApiException) as err:
        server.inject(Fault(status=403))
        client.CoreV1Api(api).list_node()
    assert err.value.status == 403 and orjson.loads(err.value.body)["reason"] == "Forbidden"


def test_delay_triggers_client_timeout(server, api, default_api):
    server.inject(Fault(delay=2.0, path=SLICES))
    start = time.monotonic()
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        get(api, SLICES, timeout=0.2)
    assert time.monotonic() - start < 1.5

    # Pinned client behaviour: default retries re-send a timed-out GET; the fault is used up.
    server.inject(Fault(delay=2.0, path=SLICES, times=1))
    before = len(server.requests)
    assert get(default_api, SLICES, timeout=0.2)[0] == 200
    assert len(server.requests) - before == 2


def test_delay_alone_then_answers_normally(server, api):
    server.inject(Fault(delay=0.05))
    status, body = get_json(api, "/api/v1/nodes")
    assert status == 200 and len(body["items"]) == 3


def test_truncated_body(server, api):
    server.inject(Fault(truncate=True, path=SLICES))
    status, _, data = get(api, SLICES)
    assert status == 200 and data.startswith(b'{"kind":"ResourceSliceList"')
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(data)
    assert orjson.loads(get(api, SLICES)[2])["kind"] == "ResourceSliceList"


def test_raw_body_fault(server, api):
    weird = b'{"kind":"ResourceSliceList","items":[{"metadata":{}},{"spec":7}]}'
    server.inject(Fault(body=weird, times=-1, path=SLICES))
    assert get(api, SLICES)[2] == weird
    assert get(api, SLICES)[2] == weird  # forever
    server.clear_faults()
    assert get(api, SLICES)[2] != weird


def test_wrong_or_missing_token_is_401(server, kubeconfig, tmp_path):
    data = yaml.safe_load(kubeconfig.read_text())
    data["users"][0]["user"]["token"] = "other-token"
    path = tmp_path / "bad-kubeconfig"
    path.write_text(yaml.safe_dump(data))
    with make_api(path, retries=False) as api:
        status, _, raw = get(api, "/api/v1/nodes")
        assert status == 401 and orjson.loads(raw)["reason"] == "Unauthorized"
        with pytest.raises(client.ApiException) as err:
            client.CoreV1Api(api).list_node()
        assert err.value.status == 401

    with pytest.raises(urllib.error.HTTPError) as http_err:
        urllib.request.urlopen(server.url + "/api/v1/nodes", timeout=5)
    assert http_err.value.code == 401
    # anonymous may still read /version, like the real server's public-info-viewer
    with urllib.request.urlopen(server.url + "/version", timeout=5) as resp:
        assert orjson.loads(resp.read())["gitVersion"] == "v1.36.1"


def test_kubeconfig_contents(server, kubeconfig):
    data = yaml.safe_load(kubeconfig.read_text())
    assert data["current-context"] == "fake"
    assert data["clusters"][0]["cluster"]["server"] == server.url
    assert data["users"][0]["user"]["token"] == "fake-token"


# --------------------------------------------------------------------------- control endpoints


def test_control_endpoints(server, cluster, api):
    initial = int(cluster.resource_version)
    assert control(server, "POST", "/_fake/advance") == (200, {"stage": 1, "advanced": True})
    assert control(server, "POST", "/_fake/advance") == (200, {"stage": 1, "advanced": False})
    assert control(server, "POST", "/_fake/stage", {"stage": 0}) == (200, {"stage": 0})
    assert cluster.stage == 0
    assert control(server, "POST", "/_fake/stage", {"stage": 9})[0] == 400

    status, body = control(
        server,
        "POST",
        "/_fake/faults",
        [{"status": 503, "path": "/api/v1/nodes", "times": 2}, {"body": "not json", "path": "/api/v1/pods"}],
    )
    assert status == 200 and body == {"faults": 2}
    assert control(server, "POST", "/_fake/faults", [{"bogus": 1}])[0] == 400
    assert get(api, "/api/v1/nodes")[0] == 503
    assert get(api, "/api/v1/pods")[2] == b"not json"

    status, state = control(server, "GET", "/_fake/state")
    assert state["stage"] == 0 and state["stages"] == 2
    assert int(state["resourceVersion"]) > initial and state["watches"] == 0
    assert [f["times"] for f in state["faults"]] == [1]
    assert state["request_count"] == 2 and state["requests"][0][:2] == ["GET", "/api/v1/nodes"]

    assert control(server, "DELETE", "/_fake/faults") == (200, {"faults": 0})
    assert get(api, "/api/v1/nodes")[0] == 200
    assert all(not path.startswith("/_fake") for _, path, _ in server.requests)


def test_concurrent_clients(server, api):
    def page_through(_: int) -> list[str]:
        out, token = [], None
        while True:
            query: list[tuple[str, Any]] = [("limit", 2)] + ([("continue", token)] if token else [])
            _, body = get_json(api, SLICES, query)
            out += names(body["items"])
            token = body["metadata"].get("continue")
            if not token:
                return out

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(page_through, range(8)))
    assert all(r == ["slice-a", "slice-b", "slice-c", "slice-d", "slice-e"] for r in results)
    assert len(server.requests) == 24


# --------------------------------------------------------------------------- loading scenarios and the CLI


def write_scenario(directory: Path) -> Path:
    directory.mkdir()
    (directory / "00-start.json").write_bytes(
        orjson.dumps({"apiVersion": "v1", "kind": "List", "items": [node("node-a"), resource_slice("s1")]})
    )
    (directory / "01-more.yaml").write_text(
        yaml.safe_dump_all(
            [
                {"apiVersion": "v1", "kind": "List", "items": [node("node-a"), node("node-b")]},
                resource_slice("s1"),
                None,  # an empty document
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSliceList",
                    "items": [
                        {k: v for k, v in resource_slice("s2").items() if k not in ("kind", "apiVersion")}
                    ],
                },
            ]
        )
    )
    (directory / "02-single.json").write_bytes(orjson.dumps(node("node-c")))
    (directory / "03-empty.yml").write_text("apiVersion: v1\nkind: List\nitems: []\n")
    (directory / "expected.json").write_bytes(orjson.dumps({"explain": [], "leaks": {}}))  # no kind: skipped
    (directory / "README.md").write_text("not a stage")
    return directory


def test_from_directory(tmp_path):
    cluster = FakeCluster.from_directory(write_scenario(tmp_path / "scenario"))
    assert cluster.stage_count == 4
    kinds = [[(o["kind"], o["metadata"]["name"]) for o in cluster.objects(i)] for i in range(4)]
    assert kinds[0] == [("Node", "node-a"), ("ResourceSlice", "s1")]
    assert kinds[1] == [
        ("Node", "node-a"),
        ("Node", "node-b"),
        ("ResourceSlice", "s1"),
        ("ResourceSlice", "s2"),
    ]
    assert kinds[2] == [("Node", "node-c")]
    assert kinds[3] == []
    # items of a typed list get their kind back, so they are served
    with FakeApiServer(cluster, token=None) as srv:
        cluster.set_stage(1)
        with urllib.request.urlopen(srv.url + SLICES, timeout=5) as resp:
            assert names(orjson.loads(resp.read())["items"]) == ["s1", "s2"]

    (tmp_path / "nothing").mkdir()
    with pytest.raises(ValueError):
        FakeCluster.from_directory(tmp_path / "nothing")


def test_command_line(tmp_path):
    scenario = write_scenario(tmp_path / "scenario")
    kc = tmp_path / "kc.yaml"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "demo.fake_apiserver",
            "--scenario",
            str(scenario),
            "--kubeconfig",
            str(kc),
            "--page-size",
            "1",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        req = urllib.request.Request(url + "/_fake/advance", method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert orjson.loads(resp.read()) == {"stage": 1, "advanced": True}
        with make_api(kc, retries=False) as api:
            status, body = get_json(api, "/api/v1/nodes")  # no limit, but the server caps pages at 1
            assert status == 200 and names(body["items"]) == ["node-a"] and body["metadata"]["continue"]
    finally:
        proc.terminate()
        proc.wait(timeout=5)
    assert proc.returncode == 0
