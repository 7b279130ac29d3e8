"""The devices allocated over the overview chart's window, counted by PostgreSQL from the stored spans.

The chart of an earlier snapshot (``?as_of=``) is computed on read. Counted in Python, it loaded every
allocation span of its 24 hours (30,000 at 5,000 nodes) to find where the count changes, a thousand
times or so: most of that read's time. PostgreSQL counts them where they are stored and returns only
the changes (``capacity.AllocatedSteps``).

It counts as ``capacity.allocated_steps`` does when every allocation holds its device whole: a device
counts once however many spans hold it at a time (the query's comment says how). When the
snapshot's inventory has a device a claim may hold part of, the fractions need the claims (decoded
in Python), and the caller counts the pieces instead (None here); SQLite (the embedded default) too.
tests/test_allocated_steps.py checks both ways give the same steps.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection, transaction

from collector.history_reader import StoredHistory
from derived.models import AllocationSpan
from derived.writer import held_in_part_of
from domain.reports.capacity import AllocatedSteps

# A span counts from its start (or the window's) while it is known as of the snapshot (``seen``), until
# it ends; one still held at the snapshot, or ended after it, is open there. A device only one span holds
# in the window moves the count where that span starts and ends. For a device several spans hold, a
# running sum over its spans' starts and ends says how many hold it after each, and the count moves
# where that crosses between none and some (in whatever order a time's starts and ends come, a device's
# moves at that time add up to the same). Sorting only those few devices' spans keeps the query to
# hash joins and aggregates: ~60 ms for 30,000 spans.
_STEPS = """
WITH piece AS MATERIALIZED (
    SELECT driver, pool, device, GREATEST(start, %(since)s) AS at,
           CASE WHEN "end" IS NULL OR "end" > %(as_of)s THEN %(as_of)s ELSE "end" END AS finish
    FROM {table}
    WHERE cluster_id = %(cluster)s AND seen <= %(as_of)s AND start < %(as_of)s
      AND ("end" IS NULL OR "end" > %(since)s) AND ("end" IS NULL OR "end" > start)
), several AS (
    SELECT driver, pool, device FROM piece GROUP BY driver, pool, device HAVING COUNT(*) > 1
), shared AS (
    SELECT driver, pool, device, at, 1 AS delta FROM piece JOIN several USING (driver, pool, device)
    UNION ALL
    SELECT driver, pool, device, finish, -1 FROM piece JOIN several USING (driver, pool, device)
    WHERE finish < %(as_of)s
), shared_held AS (
    SELECT at, delta,
           SUM(delta) OVER (PARTITION BY driver, pool, device ORDER BY at ROWS UNBOUNDED PRECEDING) AS holders
    FROM shared
), lone AS (
    SELECT at, finish FROM piece WHERE NOT EXISTS (
        SELECT FROM several
        WHERE (several.driver, several.pool, several.device) = (piece.driver, piece.pool, piece.device)
    )
), moves AS (
    SELECT at, 1 AS moved FROM lone
    UNION ALL
    SELECT finish, -1 FROM lone WHERE finish < %(as_of)s
    UNION ALL
    SELECT at, LEAST(holders, 1) - LEAST(holders - delta, 1) FROM shared_held
)
SELECT at, SUM(moved)::integer FROM moves GROUP BY at HAVING SUM(moved) <> 0 ORDER BY at
"""


def stored_steps(history: StoredHistory, since: datetime) -> AllocatedSteps | None:
    """``capacity.allocated_steps`` of the layer's spans from ``since`` to the history's time; None when
    the layer does not cover the snapshot, its inventory has devices held in part, or this is not
    PostgreSQL."""
    if connection.vendor != "postgresql" or held_in_part_of(history.snapshot_pk) is not False:
        return None
    params: dict[str, Any] = {"cluster": history.cluster.pk, "as_of": history.as_of, "since": since}
    with transaction.atomic(), connection.cursor() as cursor:
        # 30,000 spans' devices fit in PostgreSQL's default 4 MB of hash tables only in batches spilled
        # to disk: 16 MB holds them (60 ms instead of 80), for this query alone.
        cursor.execute("SET LOCAL work_mem = '16MB'")
        cursor.execute(_STEPS.format(table=AllocationSpan._meta.db_table), params)
        moves = cursor.fetchall()
    steps: AllocatedSteps = [(since, 0.0)]
    total = 0.0
    for at, moved in moves:
        total += moved
        if at == since:
            steps[0] = (since, total)
        else:
            steps.append((at, total))
    return steps
