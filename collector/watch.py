"""Following a cluster: list each kind once, then watch it, into change-only history in batches.

One thread per kind reads the API (the official client's connection, raw JSON lines as in
``collector.kube``): a streaming initial list (``sendInitialEvents=true``) where the server
serves it, else a paged list; then a watch from the list's resourceVersion with bookmarks and a
server-side ``timeoutSeconds`` (jittered), resumed from the last event or bookmark after the
server ends it or the connection drops, and listed again after 410 Gone. Errors back off
exponentially with jitter; every request has a connect and a read timeout.

The ``Watcher`` applies what the threads report, in order, to a ``Mirror`` (the relevance filter and
the normalizer a collection uses) and writes what changed for history as one snapshot per batch: a
second after its first change, or sooner after ``batch_events``, whatever the derivation behind it
is doing (the next derivation covers every batch stored meanwhile). Such a snapshot covers only
the objects it names (``history_writer.write_changes``), each valid from its change's arrival; a
relist that misses an object records it deleted at the relist's time. While every watch is
healthy and nothing changes, an empty snapshot marks every ``checkpoint`` seconds that the cluster
was seen as of then (pages and alerts read the newest snapshot's time as the data's age); while a
watch keeps failing, a failed one says why, as a failed collection does.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn

import orjson
import urllib3
from django.db import DatabaseError
from kubernetes import client as k8s

from collector import history_writer as history
from collector.kinds import RESOURCE_TYPES, ResourceType
from collector.kube import (
    ClusterReader,
    CollectionError,
    NotServed,
    _network_error,
    _retry_after,
    _status_message,
    as_served,
)
from collector.mirror import Batch, Mirror, api_key
from collector.models import Cluster, ObjectVersion, Snapshot

log = logging.getLogger("claimline.collector")

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_TICK = timedelta(microseconds=1)
_DUE_AGAIN = 0.2  # a due write (a batch whose store failed, a checkpoint) is looked at again at most this often


@dataclass
class WatchSettings:
    timeout: float = 300.0  # timeoutSeconds of each watch, jittered up to twice as long (client-go's way)
    request_timeout: float = 30.0  # connect/read timeout of lists; a watch's read timeout is its timeout + this
    page_size: int = 500
    max_retries: int = 3  # of a list's page, as a collection retries
    batch_seconds: float = 1.0
    batch_events: int = 1000
    checkpoint: float = 30.0
    backoff: float = 0.5
    max_backoff: float = 30.0
    streaming_list: bool = True  # try sendInitialEvents before a paged list
    absent_recheck: float = 300.0  # how often a kind the cluster serves at no version is looked for again


class _Gone(Exception):
    """410: the resourceVersion is too old; list again."""


class _NoStreamingList(Exception):
    """The server does not serve sendInitialEvents: list page by page."""


class _Retry(Exception):
    def __init__(self, message: str, after: float | None = None) -> None:
        super().__init__(message)
        self.after = after


class _Stopped(Exception):
    pass


@dataclass
class _Message:
    kind: str
    what: str  # event, list, alive, failed, wake (nothing: a blocked pump returns)
    at: datetime
    event_type: str = ""
    obj: Any = None
    held: dict[Any, Any] = field(default_factory=dict)  # a list's objects, as Mirror.hold converted them
    error: str = ""


class _KindStream(threading.Thread):
    """One kind's list-then-watch loop, reporting to the watcher's queue."""

    def __init__(self, watcher: Watcher, rt: ResourceType) -> None:
        super().__init__(name=f"watch-{watcher.cluster_name}-{rt.plural}", daemon=True)
        self.w = watcher
        self.rt = rt
        self.served = rt  # rt at the version the API server serves (its own, or an older one it falls back to)
        self.rv: str | None = None  # where the watch resumes; None: list first
        self.absent = False  # an optional kind the API server serves at none of its versions
        self.failures = 0
        self._response: Any = None
        self._lock = threading.Lock()

    # -- the loop

    def run(self) -> None:
        with contextlib.suppress(_Stopped):
            self._loop()

    def _loop(self) -> None:
        w = self.w
        while not w.stopping.is_set():
            try:
                if self.rv is None:
                    self._sync()
                else:
                    self._watch(self.rv)
            except _Stopped:
                return
            except _Gone:
                log.info("%s: resourceVersion %s expired (410): listing again", self.name, self.rv)
                self.rv = None
                self._failed("410 Gone: listing again", pause=False)
            except _Retry as exc:
                self._failed(str(exc), after=exc.after)
            except CollectionError as exc:
                self._failed(str(exc))
            except (urllib3.exceptions.HTTPError, OSError, k8s.ApiException) as exc:
                if w.stopping.is_set():
                    return
                self._failed(f"{self._what()}: {_network_error(exc, w.settings.timeout)}")
            except orjson.JSONDecodeError as exc:
                self._failed(f"{self._what()}: a watch event is not valid JSON ({exc})")

    def _what(self) -> str:
        return f"watching {self.rt.plural}.{self.rt.group}" if self.rt.group else f"watching {self.rt.plural}"

    def _failed(self, message: str, pause: bool = True, after: float | None = None) -> None:
        self.failures += 1
        self.w.report(_Message(self.rt.kind, "failed", self.w.clock(), error=message))
        if not pause:
            return
        s = self.w.settings
        delay = after if after is not None else min(s.max_backoff, s.backoff * 2 ** (self.failures - 1))
        delay *= self.w.rng.uniform(0.5, 1.5)
        log.warning("%s: %s; again in %.1fs", self.name, message, delay)
        if self.w.stopping.wait(delay):
            raise _Stopped

    def stop(self) -> None:
        with self._lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # unblocking a read: whatever it raises, the thread ends
                response.shutdown()

    # -- listing

    def _sync(self) -> None:
        """List the kind at the first of its versions the API server serves. An optional kind served at
        none (its feature off, an older Kubernetes) is listed as empty and looked for again later."""
        for version in self.rt.api_versions:
            self.served = self.rt.served_as(version)
            try:
                self._list()
                self.absent = False
                return
            except NotServed:
                log.debug("%s: not served at %s", self.name, version)
        if not self.rt.optional:
            raise CollectionError(
                f"{self._what()}: not found (404): the API server does not serve {self.rt.plural} at "
                + " or ".join(self.rt.api_versions)
            )
        log.info("%s: not served by this cluster (tried %s); none", self.name, ", ".join(self.rt.api_versions))
        self.absent = True
        self.w.report(_Message(self.rt.kind, "list", self.w.clock(), held={}))
        self.failures = 0
        self._sleep(self.w.settings.absent_recheck)

    def _list(self) -> None:
        w = self.w
        if w.streaming is not False:
            try:
                self._watch(None, initial=True)
                return
            except _NoStreamingList as exc:
                if w.streaming is None:
                    log.info("%s: no streaming list (%s): listing page by page", self.name, exc)
                w.streaming = False
        s = w.settings
        reader = ClusterReader(
            w.api,
            page_size=s.page_size,
            timeout=s.request_timeout,
            max_retries=s.max_retries,
            sleep=self._sleep,
            backoff=s.backoff,
        )
        assert w.mirror is not None
        held: dict[Any, Any] = {}
        version = self.served.api_version
        for page in reader.pages(self.served):
            if page is None:  # the list started over
                held = {}
                continue
            held.update(w.mirror.hold(self.rt.kind, as_served(item, self.rt, version)) for item in page)
        w.count_requests(reader.requests)
        w.report(_Message(self.rt.kind, "list", w.clock(), held=held))
        self.rv = reader.list_resource_version
        self.failures = 0
        if self.rv is None:
            raise CollectionError(f"listing {self.rt.plural}: the list has no resourceVersion to watch from")

    def _sleep(self, seconds: float) -> None:
        if self.w.stopping.wait(seconds):
            raise _Stopped

    # -- watching

    def _watch(self, rv: str | None, initial: bool = False) -> None:
        w, s = self.w, self.w.settings
        timeout = int(s.timeout * w.rng.uniform(1.0, 2.0))
        params: list[tuple[str, Any]] = [("watch", "1"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", timeout)]
        if initial:
            params += [("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan")]
        else:
            params.append(("resourceVersion", rv))
        method, url, headers, _body, _post = w.api.param_serialize(
            "GET",
            self.served.list_path,
            query_params=params,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        if w.stopping.is_set():
            raise _Stopped
        w.count_requests(1)
        response = w.api.call_api(
            method,
            url,
            header_params=headers,
            _request_timeout=(min(s.request_timeout, 10.0), timeout + s.request_timeout),
        )
        raw = response.response
        with self._lock:
            self._response = raw
        try:
            if response.status != 200:
                self._refused(response.status, raw.read(), response.headers, initial)
            w.report(_Message(self.rt.kind, "alive", w.clock()))  # connected again
            self._events(raw, initial)
        finally:
            with self._lock:
                self._response = None
            raw.release_conn()

    def _refused(self, status: int, data: bytes, headers: Any, initial: bool) -> NoReturn:
        what = self._what()
        if status == 410:
            raise _Gone
        if initial and status == 404:
            raise NotServed(f"{what}: not found (404)")
        if initial and status in (400, 403, 422):
            raise _NoStreamingList(f"{status} {_status_message(data)}")
        if status in (429, 500, 502, 503, 504):
            after = _retry_after(headers, 0) or None
            raise _Retry(f"{what}: API server answered {status} {_status_message(data)}", after)
        if status == 401:
            raise CollectionError(f"{what}: unauthorized (401): the API server rejected the credentials")
        if status == 403:
            raise CollectionError(
                f"{what}: forbidden (403): the account may not watch {self.rt.plural}; "
                "grant list/watch on it (deploy/rbac.yaml)"
            )
        raise CollectionError(f"{what}: API server answered {status} {_status_message(data)}")

    def _events(self, raw: Any, initial: bool) -> None:
        w, kind = self.w, self.rt.kind
        assert w.mirror is not None
        listed: dict[Any, Any] | None = {} if initial else None
        for line in _lines(raw, w):
            if w.stopping.is_set():
                raise _Stopped
            event = orjson.loads(line)
            at = w.clock()
            event_type = event.get("type") if isinstance(event, dict) else None
            obj = event.get("object") if isinstance(event, dict) else None
            if event_type == "ERROR":
                code = obj.get("code") if isinstance(obj, dict) else None
                if code == 410:
                    raise _Gone
                message = obj.get("message") if isinstance(obj, dict) else None
                raise _Retry(f"{self._what()}: the watch answered an error {code}: {str(message)[:300]}")
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            version = meta.get("resourceVersion") if isinstance(meta, dict) else None
            if event_type == "BOOKMARK":
                notes = meta.get("annotations") if isinstance(meta, dict) else None
                if listed is not None and isinstance(notes, dict) and notes.get(INITIAL_EVENTS_END) == "true":
                    w.report(_Message(kind, "list", at, held=listed))
                    listed = None
                    w.streaming = True
                if listed is None and isinstance(version, str) and version:
                    self.rv = version
                w.report(_Message(kind, "alive", at))
            elif event_type in ("ADDED", "MODIFIED", "DELETED"):
                if listed is not None:
                    if event_type == "DELETED":
                        listed.pop(api_key(kind, obj), None)
                    else:
                        key, held = w.mirror.hold(kind, obj)
                        listed[key] = held
                    continue
                w.report(_Message(kind, "event", at, event_type=event_type, obj=obj))
                if isinstance(version, str) and version:
                    self.rv = version
            else:
                raise _Retry(f"{self._what()}: unexpected watch event type {str(event_type)[:40]!r}")
            self.failures = 0
        if listed is not None:
            # The server ended the watch without the initial list's end: it ignores sendInitialEvents.
            raise _NoStreamingList("the watch ended before the initial events' end bookmark")


def _lines(raw: Any, watcher: Watcher) -> Iterator[bytes]:
    """The non-empty lines of a streamed body, as they arrive."""
    buffer = bytearray()
    for chunk in raw.stream(65536, decode_content=True):
        watcher.count_bytes(len(chunk))
        buffer.extend(chunk)
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            if end > start:
                yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
    if buffer.strip():
        yield bytes(buffer)


class Watcher:
    """One cluster's watches and the batches they write (see the module docstring).

    ``after_write(snapshot)`` runs after each stored batch (the pipeline derives it and tells
    notices; it must not wait for the derivation: the next covers every batch stored meanwhile);
    ``on_activity()`` runs on every message from the API
    (a liveness signal).
    """

    def __init__(
        self,
        cluster_name: str,
        api: k8s.ApiClient,
        source: str,
        clock: Callable[[], datetime],
        settings: WatchSettings | None = None,
        after_write: Callable[[Snapshot], None] = lambda _s: None,
        on_activity: Callable[[], None] = lambda: None,
        rng: random.Random | None = None,
    ) -> None:
        self.cluster_name = cluster_name
        self.api = api
        self.source = source
        self.clock = clock
        self.settings = settings or WatchSettings()
        self.after_write = after_write
        self.on_activity = on_activity
        self.rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self.stopping = threading.Event()
        self.streaming: bool | None = None if self.settings.streaming_list else False
        self.queue: queue.Queue[_Message] = queue.Queue()
        self.failing: dict[str, str] = {}
        self.requests = 0
        self.bytes_read = 0
        self._counts = threading.Lock()
        self._streams: list[_KindStream] = []
        self.cluster: Cluster | None = None
        self.mirror: Mirror | None = None
        self.last_at: datetime | None = None
        self.last_snapshot: Snapshot | None = None
        self._pending_since: float | None = None
        self._last_write = time.monotonic()
        self._last_failure_record = 0.0
        self.abandoned = False  # stopped without storing what it holds (its lease was lost)
        self._listed = False
        self._in_step = False  # the first batch after the lists (what changed while not watching) is stored
        self._started = time.monotonic()

    # -- what the threads call

    def report(self, message: _Message) -> None:
        self.queue.put(message)

    def count_requests(self, n: int) -> None:
        with self._counts:
            self.requests += n

    def count_bytes(self, n: int) -> None:
        with self._counts:
            self.bytes_read += n

    # -- lifecycle

    def start(self) -> None:
        """Load what history holds, then start one stream per kind."""
        self.cluster = history.get_cluster(self.cluster_name)
        self.mirror = Mirror(stored_heads(self.cluster))
        self.last_at = (
            Snapshot.objects.usable().filter(cluster=self.cluster).order_by("-at").values_list("at", flat=True).first()
        )
        self._last_write = self._started = time.monotonic()
        self._streams = [_KindStream(self, rt) for rt in RESOURCE_TYPES]
        for stream in self._streams:
            stream.start()

    def stop(self, commit: bool = True) -> Snapshot | None:
        """Stop every stream; with ``commit``, store what arrived and is not stored yet."""
        self.stopping.set()
        for stream in self._streams:
            stream.stop()
        for stream in self._streams:
            stream.join(timeout=10)
        if self.mirror is None:
            return None
        self.pump(0)
        if commit:
            return self.flush()
        return None

    def run(self, until: threading.Event) -> None:
        """Start, then pump and write batches until ``until`` is set (or ``abandon``); then stop, storing
        what it holds unless abandoned."""
        self.start()
        try:
            while not until.is_set() and not self.stopping.is_set():
                self.pump(self.idle_for(cap=1.0))
                self.step()
        finally:
            self.stop(commit=not self.abandoned)

    def wake(self) -> None:
        """Make a ``pump`` blocked on the streams return now (to stop, say)."""
        self.queue.put(_Message("", "wake", self.clock()))

    def idle_for(self, cap: float = 30.0) -> float:
        """How long ``pump`` may block before ``step`` has something due: nothing wakes the loop while
        the cluster is quiet but a message, the next checkpoint or a batch's time (at most ``cap``)."""
        s = self.settings
        now = time.monotonic()
        if self._pending_since is not None and self.synced:
            left = self._pending_since + s.batch_seconds - now
            return min(cap, left) if left > 0 else 0.0
        if not self.synced:
            return cap
        if self.failing:
            left = max(self._last_write, self._last_failure_record) + s.checkpoint - now
        else:
            left = self._last_write + s.checkpoint - now
        return min(cap, max(left, _DUE_AGAIN))

    def abandon(self) -> None:
        """Stop without storing anything more: another process took the cluster over."""
        self.abandoned = True
        self.stopping.set()

    def pump(self, timeout: float) -> int:
        """Apply the streams' messages (waiting up to ``timeout`` for the first); how many."""
        assert self.mirror is not None
        handled = 0
        try:
            message = self.queue.get(timeout=timeout) if timeout > 0 else self.queue.get_nowait()
        except queue.Empty:
            return 0
        while True:
            handled += 1
            if message.what == "wake":
                pass
            elif message.what == "failed":
                self.failing[message.kind] = message.error
            else:
                self.failing.pop(message.kind, None)
                if message.what == "event":
                    self.mirror.apply(message.kind, message.event_type, message.obj, message.at)
                elif message.what == "list":
                    self.mirror.replace_held(message.kind, message.held, message.at)
                if message.what in ("event", "list") and self._pending_since is None:
                    self._pending_since = time.monotonic()
            if message.what != "wake":
                self.on_activity()
            if not self._listed and self.synced:
                self._listed = True
                log.info("%s: every kind listed (%.1fs); watching", self.cluster_name, time.monotonic() - self._started)
                # What it holds now lives as long as the process: out of the cyclic GC's way, which
                # would otherwise walk it again at every full collection.
                gc.collect()
                gc.freeze()
            try:
                message = self.queue.get_nowait()
            except queue.Empty:
                return handled

    @property
    def synced(self) -> bool:
        return self.mirror is not None and len(self.mirror.synced) == len(RESOURCE_TYPES)

    @property
    def healthy(self) -> bool:
        return self.synced and not self.failing

    def caught_up(self, resource_version: int) -> bool:
        """Every kind listed and its watch past ``resource_version`` (tests: the fake server's counter)."""
        return self.synced and all(
            s.absent or (s.rv is not None and int(s.rv) >= resource_version) for s in self._streams
        )

    def step(self) -> Snapshot | None:
        """Write a batch when one is due, a checkpoint when one is due, a failure when one is due."""
        s = self.settings
        now = time.monotonic()
        if self.synced and self._pending_since is not None:
            waited = now - self._pending_since
            assert self.mirror is not None
            full = self.mirror.events_seen >= s.batch_events
            if waited >= s.batch_seconds or full:
                return self.flush()
            return None
        due = now - max(self._last_write, self._last_failure_record) >= s.checkpoint
        if self.healthy and now - self._last_write >= s.checkpoint:
            return self.flush(checkpoint=True)
        if self.failing and due:
            self._record_failure()
        return None

    # -- writing

    def flush(self, checkpoint: bool = False) -> Snapshot | None:
        """Store what changed since the last batch (an empty snapshot for a checkpoint); the snapshot
        written, or None when nothing was to be written."""
        assert self.mirror is not None and self.cluster is not None
        batch: Batch = self.mirror.take()
        self._pending_since = None
        if not batch.changes and not batch.problems and not checkpoint:
            self.mirror.committed(batch)  # looked at, nothing history keeps changed
            self._caught_up(batch)
            return None
        if not self.synced:
            return None
        at = batch.at or self.clock()
        if self.last_at is not None and at <= self.last_at:
            at = self.last_at + _TICK
        try:
            objects_seen = self.mirror.kept_count() + _net_change(self.mirror, batch)
            if not batch.changes and not batch.problems:
                # nothing changed: one row says the cluster was seen as of now
                snapshot = history.write_checkpoint(self.cluster, at, f"watch {self.source}", objects_seen)
            else:
                snapshot = history.start_snapshot(self.cluster, at, f"watch {self.source}", started=self.clock())
                history.write_changes(
                    snapshot, batch.changes, finished=self.clock(), problems=batch.problems, objects_seen=objects_seen
                )
        except (DatabaseError, history.SnapshotOrderError) as exc:
            log.error("storing a watched batch of %s failed: %s", self.cluster_name, exc)
            self._pending_since = time.monotonic()  # kept pending: taken again with what arrives
            if isinstance(exc, history.SnapshotOrderError):
                self.last_at = (
                    Snapshot.objects.filter(cluster=self.cluster).order_by("-at").values_list("at", flat=True).first()
                )
            return None
        self.mirror.committed(batch)
        self._caught_up(batch)
        self.last_at = at
        self.last_snapshot = snapshot
        self._last_write = time.monotonic()
        self.after_write(snapshot)
        return snapshot

    def _caught_up(self, batch: Batch) -> None:
        if not self._in_step and self.synced:
            self._in_step = True
            log.info("%s: in step with history (%d changes stored)", self.cluster_name, len(batch.changes))

    def _record_failure(self) -> None:
        assert self.cluster is not None
        self._last_failure_record = time.monotonic()
        at = self.clock()
        if self.last_at is not None and at <= self.last_at:
            at = self.last_at + _TICK
        error = "\n".join(f"{kind}: {message}" for kind, message in sorted(self.failing.items()))
        try:
            snapshot = history.start_snapshot(self.cluster, at, f"watch {self.source}", started=self.clock())
            history.fail_snapshot(snapshot, error, self.clock())
        except (DatabaseError, history.SnapshotOrderError) as exc:
            log.error("recording the failing watch of %s failed: %s", self.cluster_name, exc)
            return
        self.last_at = at
        self.after_write(snapshot)


def _net_change(mirror: Mirror, batch: Batch) -> int:
    """How many live objects history gains with ``batch`` (new ones minus deleted ones)."""
    net = 0
    for change in batch.changes:
        stored = change.uid in mirror.written[change.kind]
        if change.obj is None and stored:
            net -= 1
        elif change.obj is not None and not stored:
            net += 1
    return net


def stored_heads(cluster: Cluster) -> dict[str, dict[str, tuple[str, str, str]]]:
    """What history holds live of ``cluster``: kind → UID → (content hash, namespace, name)."""
    heads: dict[str, dict[str, tuple[str, str, str]]] = {}
    rows = ObjectVersion.objects.filter(cluster=cluster, valid_to__isnull=True, deleted=False).values_list(
        "kind", "uid", "content_hash", "namespace", "name"
    )
    for kind, uid, digest, namespace, name in rows.iterator(5000):
        heads.setdefault(kind, {})[uid] = (digest, namespace, name)
    return heads
