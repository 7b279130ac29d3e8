"""A small fake Kubernetes API server on loopback, for tests and the demo.

It serves read-only list/get responses for the core and resource.k8s.io/v1
resources Claimline collects, from a sequence of "stages" (each one a cluster
state), with real-server pagination semantics and injectable faults, so the
collector's real `kubernetes` client code path runs against it.

    python -m demo.fake_apiserver --scenario DIR [--host H] [--port P]
        [--kubeconfig PATH] [--page-size N] [--verbose]
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import dataclasses
import os
import signal
import socket
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson
import yaml

GIT_VERSION = "v1.36.1"
RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_API_VERSION = f"{RESOURCE_GROUP}/v1"


@dataclass(frozen=True)
class Resource:
    name: str  # plural, as in the URL
    kind: str
    api_version: str  # the version served by default: "v1", "resource.k8s.io/v1", …
    namespaced: bool
    # Other versions an object of the kind may be written in; a server may serve one of them instead.
    other_versions: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def versions(self) -> tuple[str, ...]:
        return (self.api_version, *self.other_versions)

    @property
    def qualified(self) -> str:
        # how the real server names a resource in error messages
        return f"{self.name}.{self.group}" if self.group else self.name


SCHEDULING_API_VERSION = "scheduling.k8s.io/v1beta1"
SCHEDULING_ALPHA = "scheduling.k8s.io/v1alpha3"

RESOURCES: tuple[Resource, ...] = (
    Resource("pods", "Pod", "v1", True),
    Resource("nodes", "Node", "v1", False),
    Resource("namespaces", "Namespace", "v1", False),
    Resource("events", "Event", "v1", True),
    Resource("deviceclasses", "DeviceClass", RESOURCE_API_VERSION, False),
    Resource("resourceslices", "ResourceSlice", RESOURCE_API_VERSION, False),
    Resource("resourceclaims", "ResourceClaim", RESOURCE_API_VERSION, True),
    Resource("resourceclaimtemplates", "ResourceClaimTemplate", RESOURCE_API_VERSION, True),
    Resource(
        "devicetaintrules",
        "DeviceTaintRule",
        RESOURCE_API_VERSION,
        False,
        (f"{RESOURCE_GROUP}/v1beta2", f"{RESOURCE_GROUP}/v1alpha3"),
    ),
    Resource("workloads", "Workload", SCHEDULING_API_VERSION, True, (SCHEDULING_ALPHA,)),
    Resource("podgroups", "PodGroup", SCHEDULING_API_VERSION, True, (SCHEDULING_ALPHA,)),
)
BY_KIND = {r.kind: r for r in RESOURCES}


EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
DEFAULT_MESSAGES = {
    401: "Unauthorized",
    404: "the server could not find the requested resource",
    410: EXPIRED_MESSAGE,
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted",
}


def status_body(code: int, message: str | None = None, details: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message or DEFAULT_MESSAGES.get(code, REASONS.get(code, "error")),
        "reason": REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details:
        body["details"] = details
    return orjson.dumps(body)


# --------------------------------------------------------------------------- cluster


@dataclass
class _Entry:
    namespace: str
    name: str
    obj: dict[str, Any]  # full object, with kind/apiVersion (get-one answers)
    item: bytes  # serialized without kind/apiVersion (list items)


def _resource_for(obj: Any) -> Resource | None:
    if not isinstance(obj, dict):
        return None
    res = BY_KIND.get(obj.get("kind", ""))
    if res is None:
        return None
    # Strict on apiVersion: serving e.g. a v1beta1 ResourceSlice as v1 would
    # hide shape differences the collector has to cope with. Kinds whose versions
    # share one shape (PodGroup v1alpha3 and v1beta1) are served at the server's version.
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version not in res.versions:
        return None
    return res


def _index(objects: Iterable[dict[str, Any]]) -> dict[str, list[_Entry]]:
    index: dict[str, list[_Entry]] = {r.name: [] for r in RESOURCES}
    for obj in objects:
        res = _resource_for(obj)
        if res is None:
            continue
        meta = obj.get("metadata") or {}
        ns = (meta.get("namespace") or "") if res.namespaced else ""
        full = {"kind": res.kind, "apiVersion": res.api_version}
        full.update({k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})
        item = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
        index[res.name].append(_Entry(ns, str(meta.get("name") or ""), full, orjson.dumps(item)))
    for entries in index.values():
        # the real server lists in etcd key order: namespace, then name
        entries.sort(key=lambda e: (e.namespace, e.name))
    return index


class FakeCluster:
    """Stages of cluster state; one of them is current."""

    def __init__(self, stages: list[list[dict[str, Any]]]):
        if not stages:
            raise ValueError("FakeCluster needs at least one stage")
        self._lock = threading.Lock()
        # copies, so callers mutating their dicts later do not change a stage
        self._stages: list[list[dict[str, Any]]] = [orjson.loads(orjson.dumps(list(s))) for s in stages]
        self._indexes: dict[int, dict[str, list[_Entry]]] = {}
        self._stage = 0
        # bumped on every visible change, like a real resourceVersion (never goes back)
        self._generation = 1

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> FakeCluster:
        """One stage per file, sorted by name.

        Files with no Kubernetes document at all (e.g. a scenario's expected.json)
        are skipped rather than becoming an empty stage.
        """
        directory = Path(path)
        stages: list[list[dict[str, Any]]] = []
        for file in sorted(directory.iterdir(), key=lambda p: p.name):
            if not file.is_file() or file.suffix.lower() not in (".json", ".yaml", ".yml"):
                continue
            docs = _load_documents(file)
            if not any(isinstance(d, dict) and "kind" in d for d in docs):
                continue
            stages.append(list(_flatten(docs)))
        if not stages:
            raise ValueError(f"no Kubernetes objects found in {directory}")
        return cls(stages)

    @property
    def stage(self) -> int:
        return self._stage

    @property
    def stage_count(self) -> int:
        return len(self._stages)

    @property
    def resource_version(self) -> str:
        return str(self._generation)

    def advance(self) -> bool:
        with self._lock:
            if self._stage + 1 >= len(self._stages):
                return False
            self._stage += 1
            self._generation += 1
            return True

    def set_stage(self, i: int) -> None:
        with self._lock:
            if not 0 <= i < len(self._stages):
                raise IndexError(f"stage {i} out of range 0..{len(self._stages) - 1}")
            if i != self._stage:
                self._stage = i
                self._generation += 1

    def replace_stage(self, i: int, objects: list[dict[str, Any]]) -> None:
        copied = orjson.loads(orjson.dumps(list(objects)))
        with self._lock:
            if not 0 <= i < len(self._stages):
                raise IndexError(f"stage {i} out of range 0..{len(self._stages) - 1}")
            self._stages[i] = copied
            self._indexes.pop(i, None)
            if i == self._stage:
                self._generation += 1

    def objects(self, i: int | None = None) -> list[dict[str, Any]]:
        """The raw objects of a stage (the current one by default)."""
        with self._lock:
            return list(self._stages[self._stage if i is None else i])

    def snapshot(self) -> tuple[int, int, dict[str, list[_Entry]]]:
        """(stage, generation, index) read together, so one response is consistent."""
        with self._lock:
            i = self._stage
            index = self._indexes.get(i)
            if index is None:
                index = self._indexes[i] = _index(self._stages[i])
            return i, self._generation, index


def _load_documents(file: Path) -> list[Any]:
    data = file.read_bytes()
    if file.suffix.lower() == ".json":
        return [orjson.loads(data)]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(data, Loader=loader) if d is not None]


def _flatten(docs: Iterable[Any]) -> Iterator[dict[str, Any]]:
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        kind = doc.get("kind", "")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            # typed lists (PodList) carry kind/apiVersion on the list only
            item_kind = kind[: -len("List")] if kind != "List" else None
            for item in doc["items"]:
                if isinstance(item, dict) and item_kind and "kind" not in item:
                    res = BY_KIND.get(item_kind)
                    api_version = res.api_version if res else doc.get("apiVersion")
                    item = {"kind": item_kind, "apiVersion": api_version, **item}
                yield from _flatten([item])
        elif "kind" in doc:
            yield doc


# --------------------------------------------------------------------------- faults


@dataclass
class Fault:
    status: int | None = None  # answer with a Status body and this code
    retry_after: int | None = None  # Retry-After header; implies 429 when status is None
    delay: float = 0.0  # sleep first; with nothing else set the request then proceeds normally
    truncate: bool = False  # 200 with the normal body cut in half (Content-Length matches the cut)
    body: bytes | None = None  # this raw 200 body instead
    path: str = ""  # only requests whose path starts with this
    on_continue: bool = False  # only requests carrying a continue token
    times: int = 1  # matching requests it applies to; -1 = forever

    def matches(self, path: str, query: dict[str, str]) -> bool:
        if self.times == 0 or not path.startswith(self.path):
            return False
        return not self.on_continue or bool(query.get("continue"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fault:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown fault fields: {sorted(unknown)}")
        data = dict(data)
        if isinstance(data.get("body"), str):
            data["body"] = data["body"].encode()
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if self.body is not None:
            d["body"] = self.body.decode("utf-8", "replace")
        return d


# --------------------------------------------------------------------------- continue tokens


class _BadToken(Exception):
    pass


def encode_continue(stage: int, generation: int, resource: str, namespace: str, offset: int) -> str:
    payload = orjson.dumps(
        {"stage": stage, "rv": generation, "resource": resource, "ns": namespace, "offset": offset}
    )
    # unpadded URL-safe base64 like the real server, so it survives query encoding as-is
    return base64.urlsafe_b64encode(payload).rstrip(b"=").decode()


def decode_continue(token: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise _BadToken("continue key is not valid: illegal base64 data") from exc
    fields = (("stage", int), ("rv", int), ("resource", str), ("ns", str), ("offset", int))
    if not isinstance(data, dict) or not all(isinstance(data.get(k), t) for k, t in fields):
        raise _BadToken("continue key is not valid: unexpected token contents")
    if data["offset"] < 0:
        raise _BadToken("continue key is not valid: negative offset")
    return data


# --------------------------------------------------------------------------- HTTP


class _Response:
    __slots__ = ("status", "body", "headers")

    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None):
        self.status = status
        self.body = body
        self.headers = headers or {}


def _error(code: int, message: str | None = None, details: dict[str, Any] | None = None) -> _Response:
    return _Response(code, status_body(code, message, details))


def _json(data: Any, status: int = 200) -> _Response:
    return _Response(status, orjson.dumps(data))


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeApiServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # clients dropping connections (timeouts, stop()) are expected here
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _HTTPServer6(_HTTPServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # small header and body writes otherwise wait on the client's delayed ACK (~40 ms)
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.fake._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.fake.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def _dispatch(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            try:
                response = self.server.fake._handle(
                    method, self.path, self.headers.get("Authorization"), body
                )
            except Exception as exc:
                # a bug here should reach the client as a 500, not a dropped connection
                traceback.print_exc()
                response = _error(500, f"fake API server error: {exc!r}")
            if response is None:  # server stopping mid-delay
                self.close_connection = True
                return
            self.send_response(response.status)
            headers = {"Content-Type": "application/json", **response.headers}
            headers["Content-Length"] = str(len(response.body))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            # the client gave up (e.g. its timeout fired during a delay fault)
            self.close_connection = True


class FakeApiServer:
    def __init__(
        self,
        cluster: FakeCluster,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = "fake-token",  # noqa: S107 - a loopback test double's well-known token
        page_size: int | None = None,
        verbose: bool = False,
        served: dict[str, str | None] | None = None,
    ):
        """``served``: kind → the version this server serves it at instead of the default, or None
        for a kind it does not serve at all (an older Kubernetes, a feature gate off)."""
        self.cluster = cluster
        versions: dict[str, str | None] = {r.kind: r.api_version for r in RESOURCES}
        for kind, version in (served or {}).items():
            if kind not in versions or (version is not None and version not in BY_KIND[kind].versions):
                raise ValueError(f"cannot serve {kind} at {version}")
            versions[kind] = version
        self.served: dict[tuple[str, str], Resource] = {
            (version, BY_KIND[kind].name): BY_KIND[kind] for kind, version in versions.items() if version is not None
        }
        self.host = host
        self.port = port
        self.token = token  # None disables auth
        # server-side cap on list pages: real servers may return fewer than limit
        self.page_size = page_size
        self.verbose = verbose
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None

    # -- lifecycle

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("server not started")
        return self._url

    def start(self) -> str:
        if self._httpd is not None:
            return self.url
        cls = _HTTPServer6 if ":" in self.host else _HTTPServer
        httpd = cls((self.host, self.port), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._stopping.clear()
        port = self.port = int(httpd.server_address[1])
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name="fake-apiserver"
        )
        self._thread.start()
        return self._url

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()  # wakes handlers sleeping in a delay fault
        httpd.shutdown()
        httpd.server_close()
        # keep-alive connections would otherwise keep their handler threads alive
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    # -- faults

    def inject(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def _take_fault(self, path: str, query: dict[str, str]) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(path, query):
                    if fault.times > 0:
                        fault.times -= 1
                    if fault.times == 0:
                        self._faults.remove(fault)
                    return fault
        return None

    # -- kubeconfig

    def write_kubeconfig(self, path: str | os.PathLike[str], context: str = "fake") -> None:
        user: dict[str, Any] = {"token": self.token} if self.token is not None else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": user}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
            "preferences": {},
        }
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # atomic, since another process (the demo's collector) may be reading it
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".kubeconfig-")
        with os.fdopen(fd, "w") as fh:
            yaml.safe_dump(config, fh, sort_keys=False)
        os.replace(tmp, target)

    # -- request handling

    def _handle(self, method: str, raw_path: str, authorization: str | None, body: bytes) -> _Response | None:
        split = urlsplit(raw_path)
        path = unquote(split.path)
        if len(path) > 1:
            path = path.rstrip("/")
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}

        if path.startswith("/_fake/") or path == "/_fake":
            return self._control(method, path, body)

        with self._lock:
            self.requests.append((method, path, query))

        fault = self._take_fault(path, query)
        if fault is not None:
            if fault.delay > 0 and self._stopping.wait(fault.delay):
                return None
            if fault.status is not None or fault.retry_after is not None:
                return self._fault_status(fault, path)
            if fault.body is not None:
                return _Response(200, fault.body)
            if fault.truncate:
                normal = self._serve(method, path, query, authorization)
                return _Response(200, normal.body[: len(normal.body) // 2])
        return self._serve(method, path, query, authorization)

    def _fault_status(self, fault: Fault, path: str) -> _Response:
        code = fault.status if fault.status is not None else 429
        headers = {}
        details: dict[str, Any] | None = None
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
            details = {"retryAfterSeconds": fault.retry_after}
        message = None
        if code == 403:
            message = f'forbidden: User "system:serviceaccount:claimline:collector" cannot get path "{path}"'
        response = _error(code, message, details)
        response.headers.update(headers)
        return response

    def _authorized(self, authorization: str | None, path: str) -> bool:
        if self.token is None:
            return True
        if authorization is None:
            # anonymous may read public info, as with the default system:public-info-viewer
            return path in ("/healthz", "/livez", "/readyz", "/version")
        scheme, _, value = authorization.partition(" ")
        return scheme.lower() == "bearer" and value.strip() == self.token

    def _serve(self, method: str, path: str, query: dict[str, str], authorization: str | None) -> _Response:
        if not self._authorized(authorization, path):
            return _error(401)
        if method != "GET":
            return _error(405, f"the fake API server is read-only; {method} is not supported")

        if path in ("/healthz", "/livez", "/readyz"):
            return _Response(200, b"ok", {"Content-Type": "text/plain; charset=utf-8"})
        if path == "/version":
            return _json(
                {
                    "major": "1",
                    "minor": "36",
                    "gitVersion": GIT_VERSION,
                    "gitCommit": "0000000000000000000000000000000000000000",
                    "gitTreeState": "clean",
                    "buildDate": "2026-01-01T00:00:00Z",
                    "goVersion": "go1.25.0",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                }
            )
        if path == "/api":
            return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if path == "/apis":
            groups: dict[str, list[str]] = {}
            for version, _plural in self.served:
                if "/" in version:
                    group, _, v = version.partition("/")
                    if v not in groups.setdefault(group, []):
                        groups[group].append(v)
            listed = []
            for group, group_versions in groups.items():
                gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in group_versions]
                listed.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
            return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": listed})

        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "v1"]:
            api_version, rest = "v1", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3 and any(v == f"{parts[1]}/{parts[2]}" for v, _ in self.served):
            api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return _error(404)

        if not rest:
            return self._resource_list(api_version)

        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        res = self.served.get((api_version, rest[0]))
        if res is None or len(rest) > 2 or (namespace is not None and not res.namespaced):
            return _error(404)

        if len(rest) == 2:
            if res.namespaced and namespace is None:
                return _error(404)
            return self._get_one(res, api_version, namespace or "", rest[1])

        watch = query.get("watch", "").lower()
        if watch not in ("", "false", "0"):
            return _error(400, "watch is not supported by the fake API server; use list with limit/continue")
        return self._list(res, api_version, namespace, query)

    def _resource_list(self, api_version: str) -> _Response:
        resources = [
            {
                "name": r.name,
                "singularName": r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "list"],
            }
            for (version, _plural), r in self.served.items()
            if version == api_version
        ]
        return _json(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": api_version,
                "resources": resources,
            }
        )

    def _get_one(self, res: Resource, api_version: str, namespace: str, name: str) -> _Response:
        _, _, index = self.cluster.snapshot()
        for entry in index[res.name]:
            if entry.namespace == namespace and entry.name == name:
                return _json({**entry.obj, "apiVersion": api_version})
        details = {"name": name, "group": res.group, "kind": res.name}
        return _error(404, f'{res.qualified} "{name}" not found', details)

    def _list(self, res: Resource, api_version: str, namespace: str | None, query: dict[str, str]) -> _Response:
        stage, generation, index = self.cluster.snapshot()
        entries = index[res.name]
        if namespace is not None:
            entries = [e for e in entries if e.namespace == namespace]

        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            return _error(400, f"invalid limit: {query.get('limit')!r}")
        if self.page_size:
            limit = min(limit, self.page_size) if limit > 0 else self.page_size

        offset = 0
        token = query.get("continue")
        if token:
            try:
                data = decode_continue(token)
            except _BadToken as exc:
                return _error(400, str(exc))
            if data["resource"] != res.name or data["ns"] != (namespace or ""):
                return _error(400, "continue key is not valid: the token was issued for a different list")
            if data["rv"] != generation:
                return _error(410, EXPIRED_MESSAGE)
            offset = data["offset"]

        end = len(entries) if limit <= 0 else min(offset + limit, len(entries))
        page = entries[offset:end]
        meta: dict[str, Any] = {"resourceVersion": str(generation)}
        if end < len(entries):
            meta["continue"] = encode_continue(stage, generation, res.name, namespace or "", end)
            meta["remainingItemCount"] = len(entries) - end
        head = orjson.dumps({"kind": f"{res.kind}List", "apiVersion": api_version, "metadata": meta})
        # splice pre-serialized items in, so big stages cost one join per request
        body = head[:-1] + b',"items":[' + b",".join(e.item for e in page) + b"]}"
        return _Response(200, body)

    # -- control endpoints (no auth, never faulted or logged)

    def _control(self, method: str, path: str, body: bytes) -> _Response:
        try:
            payload = orjson.loads(body) if body.strip() else None
        except orjson.JSONDecodeError as exc:
            return _json({"error": f"invalid JSON body: {exc}"}, 400)

        if path == "/_fake/state" and method == "GET":
            return _json(self._state())
        if path == "/_fake/advance" and method == "POST":
            advanced = self.cluster.advance()
            return _json({"stage": self.cluster.stage, "advanced": advanced})
        if path == "/_fake/stage" and method == "POST":
            stage = payload.get("stage") if isinstance(payload, dict) else None
            if not isinstance(stage, int) or isinstance(stage, bool):
                return _json({"error": 'body must be {"stage": <int>}'}, 400)
            try:
                self.cluster.set_stage(stage)
            except IndexError as exc:
                return _json({"error": str(exc)}, 400)
            return _json({"stage": self.cluster.stage})
        if path == "/_fake/faults" and method == "POST":
            items = payload if isinstance(payload, list) else [payload]
            try:
                faults = [Fault.from_dict(item) for item in items if isinstance(item, dict)]
                if len(faults) != len(items):
                    raise ValueError("body must be a list of fault objects")
            except (TypeError, ValueError) as exc:
                return _json({"error": str(exc)}, 400)
            for fault in faults:
                self.inject(fault)
            return _json({"faults": len(self.faults)})
        if path == "/_fake/faults" and method == "DELETE":
            self.clear_faults()
            return _json({"faults": 0})
        return _json({"error": f"no control endpoint {method} {path}"}, 404)

    def _state(self) -> dict[str, Any]:
        with self._lock:
            faults = [f.to_json() for f in self._faults]
            count = len(self.requests)
            recent = [list(r) for r in self.requests[-100:]]
        return {
            "stage": self.cluster.stage,
            "stages": self.cluster.stage_count,
            "resourceVersion": self.cluster.resource_version,
            "faults": faults,
            "request_count": count,
            "requests": recent,
        }


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m demo.fake_apiserver",
        description="Serve a scenario directory as a fake kube-apiserver.",
    )
    parser.add_argument(
        "--scenario", required=True, help="directory of stage files (*.json, *.yaml), one per stage"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig", help="write a kubeconfig pointing at this server here")
    parser.add_argument("--token", default="fake-token")
    parser.add_argument("--page-size", type=int, default=None, help="cap every list page at N items")
    parser.add_argument("--verbose", action="store_true", help="log requests to stderr")
    args = parser.parse_args(argv)

    cluster = FakeCluster.from_directory(args.scenario)
    server = FakeApiServer(
        cluster,
        host=args.host,
        port=args.port,
        token=args.token,
        page_size=args.page_size,
        verbose=args.verbose,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    url = server.start()
    try:
        if args.kubeconfig:
            server.write_kubeconfig(args.kubeconfig)
        print(url, flush=True)
        print(
            f"{cluster.stage_count} stage(s), kubeconfig {args.kubeconfig or '-'}",
            file=sys.stderr,
            flush=True,
        )
        done.wait()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
