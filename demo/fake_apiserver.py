"""A small fake Kubernetes API server on loopback, for tests and the demo.

It serves read-only list, get and watch responses for the core and resource.k8s.io/v1
resources Claimline collects, from a sequence of "stages" (each one a cluster
state), with real-server pagination semantics and injectable faults, so the
collector's real `kubernetes` client code path runs against it.

Like kube-apiserver: one resourceVersion counter across every object's change; watches
(``?watch=1``) stream JSON lines of ADDED/MODIFIED/DELETED/BOOKMARK/ERROR events over chunked
HTTP, from a resourceVersion (410 Expired once it is older than the kept window), with
``allowWatchBookmarks``, ``timeoutSeconds`` and the streaming list (``sendInitialEvents=true``
with ``resourceVersionMatch=NotOlderThan``: the objects as ADDED events, then a BOOKMARK
annotated ``k8s.io/initial-events-end``); field and label selectors on lists and watches
(an object leaving a watch's selection is DELETED, one entering it ADDED); and the Table
answers kubectl asks for (``fake_tables``). With ``tls`` (``demo.pki``) it serves HTTPS and its kubeconfig
carries the CA (``certificate-authority-data``), as the demo runs it: kubectl sends no bearer token over plain
HTTP, and the official client verifies the certificate as it would a cluster's.

    python -m demo.fake_apiserver --scenario DIR [--host H] [--port P]
        [--kubeconfig PATH] [--tls] [--page-size N] [--bookmark-interval S] [--verbose]
"""

from __future__ import annotations

import argparse
import base64
import binascii
import bisect
import contextlib
import dataclasses
import hashlib
import os
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson
import yaml

from demo import fake_tables as tables
from demo.fake_churn import ChurnPlayer
from demo.fake_selectors import Matcher, SelectorError, combined, field_matcher, label_matcher
from demo.fake_tables import wants_table
from demo.pki import ServingPki, serving_pki

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

    def served_as(self, api_version: str) -> Resource:
        """The same resource at another of its versions (``api_version`` one of ``versions``)."""
        return self if api_version == self.api_version else replace(self, api_version=api_version, other_versions=())

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
    obj: dict[str, Any]  # full object, with kind/apiVersion and the server's resourceVersion (get-one answers)
    item: bytes  # serialized without kind/apiVersion (list items)
    rv: int = 0  # the resourceVersion of its last change
    digest: bytes = b""  # its content without resourceVersion: what counts as a change
    uid: str = ""


@dataclass(frozen=True)
class Change:
    """One object's change, as a watch reports it: ``new`` is the object at ``rv`` (for DELETED, its
    last state stamped with the deletion's resourceVersion), ``old`` what it was before."""

    rv: int
    resource: str  # plural
    type: str  # ADDED, MODIFIED or DELETED
    old: _Entry | None
    new: _Entry


class Gone(Exception):
    """A resourceVersion older than the server's event window (410 Expired)."""

    def __init__(self, requested: int, oldest: int):
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested, self.oldest = requested, oldest


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


_Key = tuple[str, str, int]  # namespace, name, which of the objects sharing them (malformed stages repeat)
_Target = tuple[dict[str, Any], bytes, str]  # full object as the stage has it, digest, uid


def _stage_targets(objects: Iterable[dict[str, Any]]) -> dict[str, dict[_Key, _Target]]:
    """A stage's objects by resource and key, each with the digest of its content without resourceVersion."""
    targets: dict[str, dict[_Key, _Target]] = {r.name: {} for r in RESOURCES}
    for obj in objects:
        res = _resource_for(obj)
        if res is None:
            continue
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        ns = str(meta.get("namespace") or "") if res.namespaced else ""
        name = str(meta.get("name") or "")
        full: dict[str, Any] = {"kind": res.kind, "apiVersion": res.api_version}
        full.update({k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})
        bare = full
        if "resourceVersion" in meta:
            bare = {**full, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
        digest = hashlib.blake2b(orjson.dumps(bare, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()
        uid = meta.get("uid")
        by_key = targets[res.name]
        n = 0
        while (ns, name, n) in by_key:
            n += 1
        by_key[(ns, name, n)] = (full, digest, uid if isinstance(uid, str) else "")
    return targets


def _stamped(full: dict[str, Any], rv: int, digest: bytes, uid: str) -> _Entry:
    """``full`` as the server holds it at ``rv``: its metadata.resourceVersion set."""
    meta = full.get("metadata")
    obj = full
    if isinstance(meta, dict):
        obj = {**full, "metadata": {**meta, "resourceVersion": str(rv)}}
    ns = str(meta.get("namespace") or "") if isinstance(meta, dict) else ""
    name = str(meta.get("name") or "") if isinstance(meta, dict) else ""
    item = orjson.dumps({k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})
    return _Entry(ns, name, obj, item, rv, digest, uid)


class FakeCluster:
    """Stages of cluster state; one of them is current.

    Like kube-apiserver it keeps one resourceVersion counter for everything: each object's change
    (moving to another stage adds, modifies and deletes objects) takes the next value, and its
    ``Change`` is kept for watches, the last ``window`` of them (older ones are compacted: a watch from
    before them gets 410 Expired). Moving to another stage moves the counter even when no object changed.
    """

    def __init__(self, stages: list[list[dict[str, Any]]], window: int = 10_000):
        if not stages:
            raise ValueError("FakeCluster needs at least one stage")
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # copies, so callers mutating their dicts later do not change a stage
        self._stages: list[list[dict[str, Any]]] = [orjson.loads(orjson.dumps(list(s))) for s in stages]
        self._stage = 0
        self.window = window
        self._rv = 0
        self._live: dict[str, dict[_Key, _Entry]] = {r.name: {} for r in RESOURCES}
        self._sorted: dict[str, list[_Entry]] = {r.name: [] for r in RESOURCES}
        # The lists as of the resourceVersions before recent in-place changes: a paged list started before
        # one goes on from where it was, as kube-apiserver serves a continue token until etcd compacts.
        self._before: dict[int, dict[str, list[_Entry]]] = {}
        self._log: list[Change] = []
        self._compacted = 0
        with self._lock:
            self._apply(0, record=False)
        if self._rv == 0:
            self._rv = 1
        self._compacted = self._rv  # the initial objects have no history to watch from

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
        return str(self._rv)

    @property
    def compacted(self) -> int:
        """The newest resourceVersion a watch can no longer start from (its events are gone)."""
        return self._compacted

    def advance(self) -> bool:
        with self._lock:
            if self._stage + 1 >= len(self._stages):
                return False
            self._stage += 1
            self._apply(self._stage)
            return True

    def set_stage(self, i: int) -> None:
        with self._lock:
            if not 0 <= i < len(self._stages):
                raise IndexError(f"stage {i} out of range 0..{len(self._stages) - 1}")
            if i != self._stage:
                self._stage = i
                self._apply(i)

    def replace_stage(self, i: int, objects: list[dict[str, Any]]) -> None:
        copied = orjson.loads(orjson.dumps(list(objects)))
        with self._lock:
            if not 0 <= i < len(self._stages):
                raise IndexError(f"stage {i} out of range 0..{len(self._stages) - 1}")
            self._stages[i] = copied
            if i == self._stage:
                self._apply(i)

    def apply_objects(self, upserts: Iterable[dict[str, Any]], deletes: Iterable[tuple[str, str, str]]) -> list[Change]:
        """Change some objects in place, as clients writing to the API server do (a churn between stages):
        each of ``upserts`` is added or replaced (a new UID under a known name: deleted, then added), each
        of ``deletes`` (kind, namespace, name) removed (one in both is removed). Each change takes the next
        resourceVersion; the changes made, in order. The current stage's object list is left as it was."""
        targets = _stage_targets(upserts)
        gone: dict[str, set[_Key]] = {r.name: set() for r in RESOURCES}
        for kind, namespace, name in deletes:
            res = BY_KIND.get(kind)
            if res is not None:
                gone[res.name].add((namespace if res.namespaced else "", name, 0))
        changes: list[Change] = []
        with self._lock:
            self._before[self._rv] = dict(self._sorted)
            while len(self._before) > KEPT_LISTS:
                del self._before[min(self._before)]
            for res in RESOURCES:
                live, target = self._live[res.name], targets[res.name]
                if not target and not gone[res.name]:
                    continue
                for key in sorted(gone[res.name]):
                    old = live.pop(key, None)
                    if old is not None:
                        changes.append(self._deleted(res.name, old))
                for key, (full, digest, uid) in target.items():
                    entry = live.get(key)
                    if key in gone[res.name] or (entry is not None and entry.digest == digest):
                        continue  # deleted in the same breath, or unchanged
                    if entry is not None and entry.uid != uid:
                        changes.append(self._deleted(res.name, entry))
                        entry = None
                    self._rv += 1
                    new = _stamped(full, self._rv, digest, uid)
                    changes.append(Change(self._rv, res.name, "ADDED" if entry is None else "MODIFIED", entry, new))
                    live[key] = new
                self._sorted[res.name] = [live[k] for k in sorted(live)]
            if not changes:
                self._rv += 1
            self._record(changes)
            self._changed.notify_all()
        return changes

    def _record(self, changes: list[Change]) -> None:
        """Keep ``changes`` for watches (lock held): the last ``window`` of them."""
        self._log.extend(changes)
        if len(self._log) > self.window:
            dropped = len(self._log) - self.window
            self._compacted = self._log[dropped - 1].rv
            del self._log[:dropped]

    def _deleted(self, resource: str, old: _Entry) -> Change:
        self._rv += 1
        return Change(self._rv, resource, "DELETED", old, _stamped(old.obj, self._rv, old.digest, old.uid))

    def compact(self) -> None:
        """Forget every change so far, as etcd's compaction does: watches from before now get 410."""
        with self._lock:
            self._log.clear()
            self._compacted = self._rv
            self._changed.notify_all()

    def objects(self, i: int | None = None) -> list[dict[str, Any]]:
        """The raw objects of a stage (the current one by default)."""
        with self._lock:
            return list(self._stages[self._stage if i is None else i])

    def snapshot(self) -> tuple[int, int, dict[str, list[_Entry]]]:
        """(stage, resourceVersion, entries by resource in etcd key order) read together, so one
        response is consistent: the lists are replaced, never changed, when the state moves."""
        with self._lock:
            return self._stage, self._rv, dict(self._sorted)

    def lists_at(self, rv: int) -> dict[str, list[_Entry]] | None:
        """The entries by resource as of ``rv`` when in-place changes moved the cluster on since (None: gone)."""
        with self._lock:
            return self._before.get(rv)

    def changes_after(self, rv: int) -> tuple[list[Change], int]:
        """The changes after ``rv`` and the current resourceVersion; ``Gone`` when they were compacted."""
        with self._lock:
            if rv < self._compacted:
                raise Gone(rv, self._compacted)
            start = bisect.bisect_right(self._log, rv, key=lambda c: c.rv)
            return self._log[start:], self._rv

    def wait_for_change(self, rv: int, timeout: float) -> bool:
        """Block until the resourceVersion moves past ``rv`` (True) or ``timeout`` passes (False)."""
        with self._changed:
            if self._rv > rv:
                return True
            self._changed.wait(timeout)
            return self._rv > rv

    def _apply(self, i: int, record: bool = True) -> None:
        """Make stage ``i`` the live state (lock held): a change per object that differs."""
        self._before.clear()  # another stage: continue tokens of lists before it expire
        targets = _stage_targets(self._stages[i])
        before = self._rv
        changes: list[Change] = []
        for res in RESOURCES:
            live, target = self._live[res.name], targets[res.name]
            moved = False
            for key, old in list(live.items()):
                wanted = target.get(key)
                if wanted is None or wanted[2] != old.uid:  # gone, or a new object under the old name
                    self._rv += 1
                    gone = _stamped(old.obj, self._rv, old.digest, old.uid)
                    changes.append(Change(self._rv, res.name, "DELETED", old, gone))
                    del live[key]
                    moved = True
            for key, (full, digest, uid) in target.items():
                entry = live.get(key)
                if entry is not None and entry.digest == digest:
                    continue
                self._rv += 1
                new = _stamped(full, self._rv, digest, uid)
                changes.append(Change(self._rv, res.name, "ADDED" if entry is None else "MODIFIED", entry, new))
                live[key] = new
                moved = True
            if moved:
                self._sorted[res.name] = [live[k] for k in sorted(live)]
        if self._rv == before and record:
            self._rv += 1  # another stage: continue tokens of lists before it expire
        if record:
            self._record(changes)
        self._changed.notify_all()


KEPT_LISTS = 64  # in-place changes whose earlier lists a continue token may still page through


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
    watch: bool | None = None  # only watch requests (True), only the others (False), or both (None)

    def matches(self, path: str, query: dict[str, str]) -> bool:
        if self.times == 0 or not path.startswith(self.path):
            return False
        if self.watch is not None and self.watch != _is_watch(query):
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


def _is_watch(query: dict[str, str]) -> bool:
    return query.get("watch", "").lower() not in ("", "false", "0")


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


class _Stream:
    """A watch answer: JSON lines written as HTTP chunks while ``chunks`` yields them.

    ``cancel`` is set to cut the stream off without its last chunk, as a dropped connection does."""

    __slots__ = ("chunks", "cancel", "headers", "status")

    def __init__(self, chunks: Iterator[bytes], cancel: threading.Event, headers: dict[str, str] | None = None):
        self.status = 200
        self.chunks = chunks
        self.cancel = cancel
        self.headers = headers or {}


def _error(code: int, message: str | None = None, details: dict[str, Any] | None = None) -> _Response:
    return _Response(code, status_body(code, message, details))


def _json(data: Any, status: int = 200) -> _Response:
    return _Response(status, orjson.dumps(data))


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeApiServer
    tls: ssl.SSLContext | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        if self.tls is not None:
            # The handshake happens in the request's own thread (_Handler.setup): a slow or plain-HTTP client
            # must not hold up accepting the next connection.
            conn = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        return conn, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        # clients dropping connections (timeouts, stop()) and failed TLS handshakes are expected here
        if not isinstance(sys.exc_info()[1], ConnectionError | ssl.SSLError | TimeoutError):
            super().handle_error(request, client_address)


class _HTTPServer6(_HTTPServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"
    server: _HTTPServer

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
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
            fake = self.server.fake
            try:
                response = fake._handle(
                    method, self.path, self.headers.get("Authorization"), body, accept=self.headers.get("Accept")
                )
            except Exception as exc:
                # a bug here should reach the client as a 500, not a dropped connection
                traceback.print_exc()
                response = _error(500, f"fake API server error: {exc!r}")
            if response is None:  # server stopping mid-delay
                self.close_connection = True
                return
            if isinstance(response, _Stream):
                self._stream(response)
                return
            self.send_response(response.status)
            headers = {"Content-Type": "application/json", **response.headers}
            headers["Content-Length"] = str(len(response.body))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(response.body)
            if not self.path.startswith("/_fake"):  # what a client of the API reads, not the test's controls
                fake._sent(len(response.body))
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, ssl.SSLError):
            # the client gave up (e.g. its timeout fired during a delay fault)
            self.close_connection = True

    def _stream(self, stream: _Stream) -> None:
        """A watch: chunked transfer encoding, one chunk per JSON line, as kube-apiserver sends it."""
        fake = self.server.fake
        self.send_response(200)
        headers = {"Content-Type": "application/json", "Transfer-Encoding": "chunked", **stream.headers}
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()
        fake._watching(self.connection, stream.cancel, True)
        try:
            for chunk in stream.chunks:
                if stream.cancel.is_set():
                    break
                data = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                self.wfile.write(data)
                self.wfile.flush()
                fake._sent(len(data), watch=True)
            if stream.cancel.is_set():
                # dropped: no last chunk, the client sees the connection break mid-stream
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        finally:
            fake._watching(self.connection, stream.cancel, False)
            close = getattr(stream.chunks, "close", None)
            if close is not None:
                close()


class FakeApiServer:
    def __init__(
        self,
        cluster: FakeCluster,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = "fake-token",  # noqa: S107 - a loopback test double's well-known token
        page_size: int | None = None,
        verbose: bool = False,
        bookmark_interval: float = 60.0,
        watch_timeout: float = 1800.0,
        watch_list: bool = True,
        expired_watch: str = "event",
        clock: Callable[[], datetime] | None = None,
        served: dict[str, str | None] | None = None,
        tls: ServingPki | None = None,
    ):
        """``served``: kind → the version this server serves it at instead of the default, or None
        for a kind it does not serve at all (an older Kubernetes, a feature gate off). ``tls``: serve
        HTTPS with this certificate (its CA goes into ``write_kubeconfig``'s kubeconfig)."""
        self.cluster = cluster
        self.tls = tls
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
        # Watches: a BOOKMARK this often when asked for (kube-apiserver: about a minute); a watch without
        # timeoutSeconds ends after watch_timeout (its --min-request-timeout); sendInitialEvents is served
        # when watch_list (the WatchList feature), else refused with 422 as a server without it does; a
        # watch from a compacted resourceVersion gets an ERROR event (as kube-apiserver's watch cache
        # answers) or, with expired_watch="http", a plain 410.
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.watch_list = watch_list
        if expired_watch not in ("event", "http"):
            raise ValueError("expired_watch is 'event' or 'http'")
        self.expired_watch = expired_watch
        self.clock = clock or (lambda: datetime.now(UTC))  # ages in Table answers
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.bytes_sent = 0  # response bodies (and chunk framing) written, for cost measurements
        self.watch_bytes_sent = 0  # of which on watches (a watcher's share, where a poller lists alongside)
        self.churn: ChurnPlayer | None = None
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._watches: dict[socket.socket, threading.Event] = {}
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
        if self.tls is not None:
            httpd.tls = _server_context(self.tls)
        self._httpd = httpd
        self._stopping.clear()
        port = self.port = int(httpd.server_address[1])
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._url = f"{'https' if self.tls is not None else 'http'}://{host}:{port}"
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
        self.drop_watches()
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

    def _sent(self, n: int, watch: bool = False) -> None:
        with self._lock:
            self.bytes_sent += n
            if watch:
                self.watch_bytes_sent += n

    def _watching(self, conn: socket.socket, cancel: threading.Event, add: bool) -> None:
        with self._lock:
            if add:
                self._watches[conn] = cancel
            else:
                self._watches.pop(conn, None)

    @property
    def watch_count(self) -> int:
        with self._lock:
            return len(self._watches)

    def drop_watches(self) -> int:
        """Cut every open watch off mid-stream (a load balancer's idle timeout, an apiserver restart)."""
        with self._lock:
            watches = list(self._watches.items())
        for conn, cancel in watches:
            cancel.set()
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        return len(watches)

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
        cluster: dict[str, Any] = {"server": self.url}
        if self.tls is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self.tls.ca_cert).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": cluster}],
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

    def _handle(
        self, method: str, raw_path: str, authorization: str | None, body: bytes, accept: str | None = None
    ) -> _Response | _Stream | None:
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
                normal = self._serve(method, path, query, authorization, accept)
                if isinstance(normal, _Stream):
                    normal.cancel.set()
                    return _Response(200, b'{"type":"ADDED","object":{"kind"')
                return _Response(200, normal.body[: len(normal.body) // 2])
        return self._serve(method, path, query, authorization, accept)

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

    def _serve(
        self, method: str, path: str, query: dict[str, str], authorization: str | None, accept: str | None = None
    ) -> _Response | _Stream:
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
        res = res.served_as(api_version)  # lists, watches and their items name the version asked for

        if len(rest) == 2:
            if res.namespaced and namespace is None:
                return _error(404)
            return self._get_one(res, namespace or "", rest[1])

        try:
            selects = combined(
                field_matcher(res.name, res.namespaced, query.get("fieldSelector", "")),
                label_matcher(query.get("labelSelector", "")),
            )
        except SelectorError as exc:
            return _error(400, str(exc))
        table = wants_table(accept)
        if _is_watch(query):
            return self._watch(res, namespace, query, selects, table)
        return self._list(res, namespace, query, selects, table)

    def _resource_list(self, api_version: str) -> _Response:
        resources = [
            {
                "name": r.name,
                "singularName": r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "list", "watch"],
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

    def _get_one(self, res: Resource, namespace: str, name: str) -> _Response:
        _, _, index = self.cluster.snapshot()
        for entry in index[res.name]:
            if entry.namespace == namespace and entry.name == name:
                return _json({**entry.obj, "apiVersion": res.api_version})
        details = {"name": name, "group": res.group, "kind": res.name}
        return _error(404, f'{res.qualified} "{name}" not found', details)

    def _watch(
        self, res: Resource, namespace: str | None, query: dict[str, str], selects: Matcher | None, table: bool
    ) -> _Response | _Stream:
        """A watch as kube-apiserver serves it (see the class's settings for what it can be told to do)."""
        raw_rv = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        initial = query.get("sendInitialEvents", "").lower()
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        try:
            timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else self.watch_timeout
        except ValueError:
            return _error(400, f"invalid timeoutSeconds: {query.get('timeoutSeconds')!r}")
        if initial not in ("", "true", "false"):
            return _error(400, f"invalid sendInitialEvents: {initial!r}")
        if initial:
            if not self.watch_list:
                return _error(422, "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless "
                              "the WatchList feature gate is enabled")
            if match != "NotOlderThan":
                return _error(422, "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
                              "resourceVersionMatch to NotOlderThan")
            if initial == "true" and not bookmarks:
                return _error(422, "allowWatchBookmarks: Forbidden: sendInitialEvents requires setting "
                              "allowWatchBookmarks to true")
        elif match:
            return _error(422, "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch "
                          "unless sendInitialEvents is provided")
        rv: int | None = None
        if raw_rv not in ("", "0"):
            try:
                rv = int(raw_rv)
            except ValueError:
                return _error(400, f'resourceVersion: Invalid value: "{raw_rv}": strconv.ParseUint: parsing '
                              f'"{raw_rv}": invalid syntax')
        _, current, index = self.cluster.snapshot()
        send_initial = initial == "true"
        synthetic = send_initial or (rv is None and initial != "false")
        start = current if synthetic or rv is None else rv
        if not synthetic and start < self.cluster.compacted:
            gone = Gone(start, self.cluster.compacted)
            if self.expired_watch == "http":
                return _error(410, str(gone))
        entries = index[res.name] if synthetic else []
        cancel = threading.Event()

        def visible(entry: _Entry | None) -> bool:
            return (
                entry is not None
                and (namespace is None or entry.namespace == namespace)
                and (selects is None or selects(entry.obj))
            )

        prefix = orjson.dumps({"kind": res.kind, "apiVersion": res.api_version})[:-1] + b","

        def line(kind: str, entry: _Entry) -> bytes:
            if table:
                meta = {"resourceVersion": str(entry.rv)}
                body = orjson.dumps(tables.table(res.kind, [entry.obj], self.clock(), meta))
            else:
                body = prefix + entry.item[1:] if entry.item != b"{}" else orjson.dumps(entry.obj)
            return b'{"type":"' + kind.encode() + b'","object":' + body + b"}\n"

        def bookmark(at: int, end_of_initial: bool = False) -> bytes:
            meta: dict[str, Any] = {"resourceVersion": str(at)}
            if end_of_initial:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            obj = {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}
            return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"

        def expired(gone: Gone) -> bytes:
            status = orjson.loads(status_body(410, str(gone)))
            return orjson.dumps({"type": "ERROR", "object": status}) + b"\n"

        def event_for(change: Change) -> bytes | None:
            if change.resource != res.name:
                return None
            if change.type == "DELETED":
                return line("DELETED", change.new) if visible(change.old) else None
            now_visible = visible(change.new)
            if change.type == "ADDED":
                return line("ADDED", change.new) if now_visible else None
            was_visible = visible(change.old)
            if was_visible and now_visible:
                return line("MODIFIED", change.new)
            if was_visible:
                return line("DELETED", change.new)  # no longer selected
            return line("ADDED", change.new) if now_visible else None

        def chunks() -> Iterator[bytes]:
            deadline = time.monotonic() + timeout
            last = start
            for entry in entries:
                if visible(entry):
                    yield line("ADDED", entry)
            if send_initial:
                yield bookmark(last, end_of_initial=True)
            next_bookmark = time.monotonic() + self.bookmark_interval
            while not cancel.is_set() and not self._stopping.is_set():
                try:
                    changes, current = self.cluster.changes_after(last)
                except Gone as exc:
                    yield expired(exc)
                    return
                for change in changes:
                    event = event_for(change)
                    if event is not None:
                        yield event
                last = current
                now = time.monotonic()
                if now >= deadline:
                    if bookmarks:
                        yield bookmark(last)  # kube-apiserver's last word before a timeout
                    return
                if bookmarks and now >= next_bookmark:
                    yield bookmark(last)
                    next_bookmark = now + self.bookmark_interval
                wake = min(deadline, next_bookmark) if bookmarks else deadline
                self.cluster.wait_for_change(last, min(max(wake - now, 0.0), 0.25))

        return _Stream(chunks(), cancel)

    def _list(
        self,
        res: Resource,
        namespace: str | None,
        query: dict[str, str],
        selects: Matcher | None = None,
        table: bool = False,
    ) -> _Response:
        stage, generation, index = self.cluster.snapshot()
        entries = index[res.name]
        if namespace is not None:
            entries = [e for e in entries if e.namespace == namespace]
        if selects is not None:
            entries = [e for e in entries if selects(e.obj)]

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
                earlier = self.cluster.lists_at(data["rv"]) if data["stage"] == stage else None
                if earlier is None:
                    return _error(410, EXPIRED_MESSAGE)
                generation, entries = data["rv"], earlier[res.name]  # the list as it was when it started
                if namespace is not None:
                    entries = [e for e in entries if e.namespace == namespace]
                if selects is not None:
                    entries = [e for e in entries if selects(e.obj)]
            offset = data["offset"]

        end = len(entries) if limit <= 0 else min(offset + limit, len(entries))
        page = entries[offset:end]
        meta: dict[str, Any] = {"resourceVersion": str(generation)}
        if end < len(entries):
            meta["continue"] = encode_continue(stage, generation, res.name, namespace or "", end)
            meta["remainingItemCount"] = len(entries) - end
        if table:
            include = query.get("includeObject") or "Metadata"
            return _json(tables.table(res.kind, [e.obj for e in page], self.clock(), meta, include))
        head = orjson.dumps({"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta})
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
        if path == "/_fake/compact" and method == "POST":
            self.cluster.compact()
            return _json({"compacted": self.cluster.compacted})
        if path == "/_fake/churn" and method == "POST":
            file = payload.get("file") if isinstance(payload, dict) else None
            if not isinstance(file, str):
                return _json({"error": 'body must be {"file": <path of a churn schedule>}'}, 400)
            if self.churn is not None:
                self.churn.stop()
            try:
                self.churn = ChurnPlayer.from_file(self.cluster, file)
            except (OSError, ValueError) as exc:
                return _json({"error": f"cannot play {file}: {exc}"}, 400)
            self.churn.start()
            return _json({"steps": len(self.churn.steps)})
        if path == "/_fake/churn" and method == "GET":
            return _json(self.churn.report() if self.churn is not None else {"steps": 0, "applied": 0, "changes": []})
        if path == "/_fake/drop-watches" and method == "POST":
            return _json({"dropped": self.drop_watches()})
        if path == "/_fake/faults" and method == "DELETE":
            self.clear_faults()
            return _json({"faults": 0})
        return _json({"error": f"no control endpoint {method} {path}"}, 404)

    def _state(self) -> dict[str, Any]:
        with self._lock:
            faults = [f.to_json() for f in self._faults]
            count = len(self.requests)
            recent = [list(r) for r in self.requests[-100:]]
            recent_all = list(self.requests)
        return {
            "stage": self.cluster.stage,
            "stages": self.cluster.stage_count,
            "resourceVersion": self.cluster.resource_version,
            "compacted": str(self.cluster.compacted),
            "watches": self.watch_count,
            "bytes_sent": self.bytes_sent,
            "watch_bytes_sent": self.watch_bytes_sent,
            "watch_requests": sum(1 for r in recent_all if _is_watch(r[2])),
            "faults": faults,
            "request_count": count,
            "requests": recent,
        }


def _server_context(pki: ServingPki) -> ssl.SSLContext:
    """A server-side TLS context with ``pki``'s certificate (the ssl module loads keys only from files: they
    are written to a private temporary folder and removed once loaded)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    folder = Path(tempfile.mkdtemp(prefix="claimline-tls-"))
    try:
        _ca, cert, key = pki.write(folder)
        context.load_cert_chain(cert, key)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return context


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
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with a CA of its own (in the kubeconfig)")
    parser.add_argument("--page-size", type=int, default=None, help="cap every list page at N items")
    parser.add_argument("--bookmark-interval", type=float, default=60.0, help="seconds between watch bookmarks")
    parser.add_argument("--no-watch-list", action="store_true", help="refuse sendInitialEvents (no WatchList)")
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
        bookmark_interval=args.bookmark_interval,
        watch_list=not args.no_watch_list,
        tls=serving_pki("fake-kube-apiserver") if args.tls else None,
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
