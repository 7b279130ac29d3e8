"""The finished holds a waiting Pod's estimate compares its holders with, read from allocation spans.

A span with an end is a finished hold of one device (``derived.spans``); a claim's run of devices is
one hold (its spans share ``seen``, ``start`` and ``end``), and the span keeps the claim's kin. So the
estimate of a Pod waiting on devices in use reads the holds of its holders' namespaces ending in the
window from one indexed query, instead of every claim's and Pod's versions of the last 30 days.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from derived.models import AllocationSpan
from domain.verdicts.estimates import Hold, Kin


class SpanHolds:
    """``estimates.FinishedHolds`` over one cluster's allocation spans, each window read once."""

    def __init__(self, cluster_id: int) -> None:
        self._cluster_id = cluster_id
        self._read: dict[tuple[frozenset[str], datetime, datetime], list[Hold]] = {}

    def finished_holds(self, namespaces: Collection[str], since: datetime, until: datetime) -> Sequence[Hold]:
        key = (frozenset(namespaces), since, until)
        found = self._read.get(key)
        if found is None:
            rows = (
                AllocationSpan.objects.filter(
                    cluster_id=self._cluster_id,
                    namespace__in=sorted(key[0]),
                    end__isnull=False,
                    end__gte=since,
                    end__lte=until,
                )
                .values_list("claim_uid", "namespace", "workload", "template", "start", "end")
                .distinct()
            )
            found = self._read[key] = [
                Hold(uid, Kin(namespace, workload or None, template or None), start, end)
                for uid, namespace, workload, template, start, end in rows
                if end is not None  # filtered above: for the type checker
            ]
        return found
