"""The leak flags of a derived snapshot (``LeakFlag``): the leak report's entries keyed by claim UID, so a
page flags the claims it shows with one query; written here, read by ``derived.reports.leak_flags_read``."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import orjson

from collector.models import Snapshot
from derived.models import LeakFlag
from derived.thresholds import leak_thresholds
from domain.cluster.state import ClusterState, HistoryView
from domain.cluster.timefmt import parse_time
from domain.inventory.devices import Inventory
from domain.reports.leaks import TIMED_FIELDS, find_leaks, leak_hours

# The inventory a leak report reads fractions against when no device of the snapshot is held in part:
# every allocation counts whole, none to build.
NO_INVENTORY = Inventory(ClusterState(datetime.min.replace(tzinfo=UTC), {}), [], [], {})


def write_leak_flags(snapshot: Snapshot, history: HistoryView, candidates: Iterable[str], held_in_part: bool) -> int:
    """The flagged claims among ``candidates`` as of ``snapshot``: a row opened for each new or changed
    entry, the rows of claims no longer flagged (or changed) closed; rows written."""
    rows = LeakFlag.objects.filter(cluster_id=snapshot.cluster_id)
    rows.filter(valid_from=snapshot.at).delete()  # written before by other code; what it closed reopens below
    rows.filter(valid_to=snapshot.at).update(valid_to=None)
    heads = {uid: digest for uid, digest in rows.filter(valid_to__isnull=True).values_list("claim_uid", "content_hash")}
    uids = sorted(candidates)
    entries = []
    if uids:
        inventory = None if held_in_part else NO_INVENTORY
        entries = find_leaks(history, leak_thresholds(), candidates=uids, inventory=inventory)["claims"]
    now: dict[str, tuple[dict[str, Any], str]] = {}
    for entry in entries:
        stored = stored_entry(entry)
        content = orjson.dumps(stored, option=orjson.OPT_SORT_KEYS)
        now[str(entry["uid"])] = (stored, hashlib.blake2b(content, digest_size=16).hexdigest())
    ended = [uid for uid, digest in heads.items() if uid not in now or now[uid][1] != digest]
    if ended:
        rows.filter(valid_to__isnull=True, claim_uid__in=ended).update(valid_to=snapshot.at)
    new = [
        LeakFlag(
            cluster_id=snapshot.cluster_id,
            claim_uid=uid,
            namespace=str(stored["namespace"]),
            entry=orjson.dumps(stored).decode(),
            content_hash=digest,
            valid_from=snapshot.at,
        )
        for uid, (stored, digest) in sorted(now.items())
        if heads.get(uid) != digest
    ]
    LeakFlag.objects.bulk_create(new)
    return len(new) + len(ended)


def stored_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A leak report entry without what moves with the as-of time alone, with its GPU-equivalents (the
    devices' fractions, to the four digits the entry gives them, added up)."""
    kept = {key: value for key, value in entry.items() if key not in TIMED_FIELDS}
    kept["gpu_equivalents"] = sum(float(d.get("fraction", 1.0)) for d in entry.get("devices") or ())
    return kept


def entry_at(stored: dict[str, Any], at: datetime) -> dict[str, Any]:
    """A stored entry with its hours as of ``at`` (the message, which says for how long, is not kept)."""
    entry = {key: value for key, value in stored.items() if key != "gpu_equivalents"}
    since, leaking = parse_time(stored["held_since"]), parse_time(stored["flagged_since"])
    assert since is not None and leaking is not None
    entry.update(leak_hours(len(stored.get("devices") or ()), float(stored["gpu_equivalents"]), since, leaking, at))
    return entry
