"""Reading a cluster's DRA objects through the official Kubernetes client.

Lists are paged (limit/continue) and parsed from raw JSON once: the client's
typed models are several times slower than a plain parse at cluster scale.
Every failure becomes a ``CollectionError`` naming the resource and the cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from collector.gcpause import gc_paused
from collector.kinds import RESOURCE_TYPES, ResourceType
from collector.normalize import InvalidObject, NormalizedObject, normalize
from collector.relevance import (
    FILTERED_BY,
    claim_keys,
    events_about,
    pods_reserved_or_using_claims,
    reserved_pod_uids,
    uid_of,
)
from collector.sources import ClusterSource
from domain.cluster.extended_resources import explicit_resource_names

log = logging.getLogger("claimline.collector")

MAX_RETRY_AFTER = 60.0
# Pods are kept only when they use claims (or ask for a DeviceClass's extended resource),
# Events only when about those Pods or claims. With an unreadable claim, class or Pod that
# selection is incomplete, so the kind cannot be complete either: its unselected objects
# would be recorded as deleted.


class CollectionError(Exception):
    """A collection that cannot complete; nothing from it is stored."""


class NotServed(CollectionError):
    """The API server does not serve the resource at that version (404 on a fresh list)."""


def api_client_for(source: ClusterSource, kubeconfig: str | None = None, pool_size: int | None = None) -> k8s.ApiClient:
    """An ``ApiClient`` for a configured cluster (``demo`` is resolved by the caller); ``pool_size``
    connections kept per host (a watcher holds one open per kind)."""
    cfg = k8s.Configuration()
    try:
        if source.kind == "in-cluster":
            k8s_config.load_incluster_config(client_configuration=cfg)
        else:
            k8s_config.load_kube_config(
                config_file=kubeconfig or source.path, context=source.context, client_configuration=cfg
            )
    except (ConfigException, OSError) as exc:
        raise CollectionError(f"cluster {source.name}: cannot load {source.describe()}: {exc}") from None
    # Retries are ours (with Retry-After and 410 handling), not urllib3's.
    cfg.retries = False
    if pool_size is not None:
        cfg.connection_pool_maxsize = pool_size
    return k8s.ApiClient(cfg)


@dataclass
class ReadResult:
    objects: list[NormalizedObject] = field(default_factory=list)
    complete_kinds: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    requests: int = 0
    # Optional kinds the API server serves at none of their versions: there are none of them.
    absent_kinds: set[str] = field(default_factory=set)


class ClusterReader:
    def __init__(
        self,
        api: k8s.ApiClient,
        page_size: int = 500,
        timeout: float = 30.0,
        max_retries: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        backoff: float = 1.0,
    ) -> None:
        self.api = api
        self.page_size = page_size
        self.timeout = timeout
        self.max_retries = max_retries
        self.sleep = sleep
        self.backoff = backoff
        self.requests = 0
        # The resourceVersion of the last list ``pages`` read (its first page's): where a watch resumes.
        self.list_resource_version: str | None = None

    def _get(self, path: str, params: list[tuple[str, Any]]) -> tuple[int, bytes, Any]:
        method, url, headers, _body, _post = self.api.param_serialize(
            "GET", path, query_params=params, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        self.requests += 1
        response = self.api.call_api(
            method, url, header_params=headers, _request_timeout=(min(self.timeout, 10.0), self.timeout)
        )
        try:
            data = response.read()
        finally:
            response.response.release_conn()
        return response.status, data, response.headers

    def list_items(self, rt: ResourceType) -> list[Any]:
        """All items of one resource, across pages."""
        items: list[Any] = []
        for page in self.pages(rt):
            if page is None:
                items = []
            else:
                items.extend(page)
        return items

    def pages(self, rt: ResourceType) -> Iterator[list[Any] | None]:
        """The items of one resource, one page at a time.

        ``None`` means the list restarted (its continue token expired): everything
        yielded before it must be discarded.
        """
        what = f"listing {rt.plural}.{rt.group}" if rt.group else f"listing {rt.plural}"
        token: str | None = None
        failures = 0
        while True:
            params: list[tuple[str, Any]] = [("limit", self.page_size)]
            if token:
                params.append(("continue", token))
            try:
                status, data, headers = self._get(rt.list_path, params)
            except (urllib3.exceptions.HTTPError, OSError, k8s.ApiException) as exc:
                failures += 1
                if failures > self.max_retries:
                    raise CollectionError(f"{what}: {_network_error(exc, self.timeout)}") from None
                self.sleep(self.backoff * 2 ** (failures - 1))
                continue
            if status == 410 and token:
                # The continue token expired (the list took longer than etcd keeps
                # its revision): the only consistent answer is a fresh list.
                failures += 1
                if failures > self.max_retries:
                    raise CollectionError(f"{what}: continue token expired (410) {failures} times; giving up")
                log.info("%s: continue token expired, restarting the list", what)
                token = None
                yield None
                continue
            if status in (429, 500, 502, 503, 504):
                failures += 1
                if failures > self.max_retries:
                    raise CollectionError(
                        f"{what}: API server answered {status} {_status_message(data)} "
                        f"{failures} times; giving up"
                    )
                self.sleep(_retry_after(headers, self.backoff * 2 ** (failures - 1)))
                continue
            if status == 401:
                raise CollectionError(f"{what}: unauthorized (401): the API server rejected the credentials")
            if status == 403:
                raise CollectionError(
                    f"{what}: forbidden (403): the account may not list {rt.plural}"
                    f"{'.' + rt.group if rt.group else ''}; grant list/watch on it (deploy/rbac.yaml)"
                )
            if status == 404:
                # Only a fresh list tells "not served"; a 404 mid-list is a failure like any other.
                raise (CollectionError if token else NotServed)(
                    f"{what}: not found (404): the API server does not serve {rt.api_version} {rt.plural}"
                    + (" (is Dynamic Resource Allocation enabled?)" if rt.group else "")
                )
            if status != 200:
                raise CollectionError(f"{what}: API server answered {status} {_status_message(data)}")
            try:
                page = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                failures += 1
                if failures > self.max_retries:
                    raise CollectionError(
                        f"{what}: response is not valid JSON ({exc}; {len(data)} bytes, truncated?)"
                    ) from None
                self.sleep(self.backoff * 2 ** (failures - 1))
                continue
            del data
            # A real list always has items (possibly []): a body without them, or of another
            # kind (a proxy's answer), would otherwise read as "no objects" and delete them all.
            if not isinstance(page, dict) or not isinstance(page.get("items"), list):
                raise CollectionError(f"{what}: response is not a Kubernetes list")
            if page.get("kind") != f"{rt.kind}List":
                raise CollectionError(f"{what}: response is not a {rt.kind}List (kind {_shown(page.get('kind'))})")
            metadata = page.get("metadata")
            if token is None:
                version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
                self.list_resource_version = version if isinstance(version, str) and version else None
            token = metadata.get("continue") if isinstance(metadata, dict) else None
            if token is not None and not isinstance(token, str):
                raise CollectionError(f"{what}: response has a metadata.continue that is not a string")
            token = token or None
            yield page.get("items") or []
            if not token:
                return

    def served_pages(self, rt: ResourceType, absent: set[str] | None = None) -> Iterator[tuple[str, list[Any] | None]]:
        """``pages`` of the first version of ``rt`` the API server serves, each with that version.

        An optional kind served at no version yields nothing and is added to ``absent``.
        """
        for version in rt.api_versions:
            try:
                for page in self.pages(rt.served_as(version)):
                    yield version, page
                return
            except NotServed:
                if version == rt.api_versions[-1] and not rt.optional:
                    raise
                log.debug("%s is not served at %s", rt.plural, version)
        log.info("%s: not served by this cluster (tried %s); recorded as none", rt.plural, ", ".join(rt.api_versions))
        if absent is not None:
            absent.add(rt.kind)

    def read(self) -> ReadResult:
        """A complete snapshot of everything Claimline stores, or ``CollectionError``.

        Each page is filtered and normalized as it arrives, so the raw objects of
        a kind (hundreds of MB of Pods at cluster scale) never all coexist.
        """
        result = ReadResult()
        # What the Pod and Event filters need from the claims and Pods read before them.
        reserved: set[str] = set()
        claim_uids: set[str] = set()
        named_claims: set[tuple[str, str, str]] = set()
        pod_uids: set[str] = set()
        about: set[str] = set()
        extended: set[str] = set()  # extended resource names DeviceClasses serve
        with gc_paused():
            for rt in RESOURCE_TYPES:
                objects: list[NormalizedObject] = []
                problems: list[str] = []
                position = 0
                if rt.kind == "Event":
                    about = pod_uids | claim_uids
                for version, page in self.served_pages(rt, result.absent_kinds):
                    if page is None:
                        objects, problems, position = [], [], 0
                        if rt.kind == "ResourceClaim":
                            reserved, claim_uids, named_claims = set(), set(), set()
                        elif rt.kind == "DeviceClass":
                            extended = set()
                        elif rt.kind == "Pod":
                            pod_uids = set()
                        continue
                    if rt.kind == "DeviceClass":
                        extended.update(explicit_resource_names(page))
                    elif rt.kind == "ResourceClaim":
                        reserved.update(reserved_pod_uids(page))
                        claim_uids.update(uid_of(c) for c in page)
                        named_claims.update(claim_keys(page))
                    elif rt.kind == "Pod":
                        page = pods_reserved_or_using_claims(page, reserved, extended)
                        pod_uids.update(uid_of(p) for p in page)
                    elif rt.kind == "Event":
                        page = events_about(page, about, named_claims)
                    for item in page:
                        item = as_served(item, rt, version)
                        try:
                            objects.append(normalize(rt.kind, item, position))
                        except InvalidObject as exc:
                            problems.append(str(exc))
                        position += 1
                result.objects.extend(objects)
                result.problems.extend(problems)
                if not problems and result.complete_kinds.issuperset(FILTERED_BY.get(rt.kind, ())):
                    result.complete_kinds.add(rt.kind)
        result.requests = self.requests
        return result


def as_served(item: Any, rt: ResourceType, version: str) -> Any:
    """A list's item named with the version it was served at (list items name none), so that an older
    version's object is stored as served, not as the newest."""
    if version != rt.api_version and isinstance(item, dict) and "apiVersion" not in item:
        return {**item, "apiVersion": version}
    return item


def _shown(value: Any) -> str:
    return repr(value)[:60]


def _status_message(data: bytes) -> str:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return ""
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        # The server's text is stored in Snapshot.error, where PostgreSQL refuses NUL.
        return f"({body.get('reason') or 'Failure'}: {body['message'][:300]})".replace("\x00", "\\0")
    return ""


def _retry_after(headers: Any, default: float) -> float:
    raw = headers.get("Retry-After") if headers is not None else None
    try:
        return min(max(float(raw), 0.0), MAX_RETRY_AFTER) if raw is not None else default
    except ValueError:
        return default


def _network_error(exc: BaseException, timeout: float) -> str:
    # NewConnectionError subclasses ConnectTimeoutError, so it is tested first.
    if isinstance(exc, urllib3.exceptions.NewConnectionError | ConnectionRefusedError):
        return f"cannot connect to the API server ({exc})"
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError | urllib3.exceptions.ConnectTimeoutError):
        return f"timed out after {timeout:g}s"
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return _network_error(exc.reason, timeout)
    if isinstance(exc, urllib3.exceptions.ProtocolError):
        return f"connection broken mid-response ({exc})"
    return f"{type(exc).__name__}: {exc}"
