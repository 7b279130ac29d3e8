"""Opening stored history for a command or a request: which cluster, as of when."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime

from django.conf import settings

from collector.history_reader import NoSnapshot, StoredHistory, latest_snapshot
from collector.models import Cluster
from collector.timeparse import parse_rfc3339


class ReadError(LookupError):
    """The asked cluster or time has no history; the message says which."""


def open_history(cluster_name: str | Cluster | None, as_of: str | datetime | None) -> StoredHistory:
    """History of the named cluster (or of a ``Cluster`` a view has already looked up)."""
    if isinstance(cluster_name, Cluster):
        cluster = cluster_name
    else:
        name = cluster_name or settings.CLAIMLINE_CLUSTERS[0].name
        try:
            cluster = Cluster.objects.get(name=name)
        except Cluster.DoesNotExist:
            raise ReadError(f"no history for cluster {name!r}: run collect or import-snapshot first") from None
    try:
        when = parse_rfc3339(as_of, "--as-of") if isinstance(as_of, str) else as_of
    except ValueError as exc:
        raise ReadError(str(exc)) from None
    try:
        snapshot, at = latest_snapshot(cluster, when) if when is not None else current_snapshot(cluster)
    except NoSnapshot as exc:
        raise ReadError(str(exc)) from None
    return _recent_history(cluster, snapshot, at)


# How a request about now picks its snapshot among the newest ones: installed by a layer above
# (``derived`` reads its newest derived snapshot while the derivation catches up: ``derived.current``).
NowReader = Callable[[Cluster, tuple[int, datetime]], tuple[int, datetime]]
_read_now: list[NowReader] = []


def read_now_with(pick: NowReader) -> None:
    _read_now[:] = [pick]


def current_snapshot(cluster: Cluster) -> tuple[int, datetime]:
    """The snapshot (key, time) a request about now reads; raises ``NoSnapshot`` when there is none."""
    newest = latest_snapshot(cluster)
    return _read_now[0](cluster, newest) if _read_now else newest


# History as of one snapshot never changes (later snapshots only close versions after it,
# pruning only removes what is older), so the last few opened are kept with what they
# loaded: the next page about the same snapshot skips reloading the cluster.
_recent: OrderedDict[tuple[int, int], StoredHistory] = OrderedDict()
_recent_lock = threading.Lock()


def _recent_history(cluster: Cluster, snapshot_pk: int, at: datetime) -> StoredHistory:
    size = settings.CLAIMLINE_HISTORY_CACHE
    key = (cluster.pk, snapshot_pk)
    with _recent_lock:
        cached = _recent.get(key)
        if cached is not None:
            _recent.move_to_end(key)
            return cached
    history = StoredHistory(cluster, at)
    if size > 0:
        with _recent_lock:
            _recent[key] = history
            while len(_recent) > size:
                _recent.popitem(last=False)
    return history
