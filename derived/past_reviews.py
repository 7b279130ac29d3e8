"""The final review of every week that has ended: rendered once, so a past week's page is read.

Computing a past week's review on read costs what the current week's does (seconds at thousands
of nodes), and it is asked again by every reader, the CSV and the weekly e-mail. Once a week has
ended its allocation spans are closed, so the review rendered as of the first derived snapshot on
or after its end may stand for every later snapshot (``derived.review`` says when, and why).

Two paths render it. After a derivation (``render_reviews``, for the newest snapshot): the weeks
from the newest stored row's on, so the week the previous snapshots fell in gets its final row as
soon as the first snapshot of the next week is derived, before that week's own row. And
rebuild-derived (``render_past_reviews``): every week of the rebuilt history that had snapshots,
which gives history imported before the layer existed its rows; a week whose final row stands
(same thresholds, same DOMAIN_VERSION) is skipped, so running it again renders nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime

import orjson

from collector.history_reader import StoredHistory
from collector.models import Cluster, Snapshot
from derived.models import DOMAIN_VERSION, DerivedSnapshot, ReviewDocument
from derived.rendered import latest_derived
from derived.review import is_final, render_latest_review, store_review, stored_source
from derived.thresholds import leak_thresholds
from domain.reports.capacity import WEEK, week_containing, weekly_review
from domain.reports.leaks import Thresholds


def render_reviews(snapshot: Snapshot, force: bool = False) -> bool:
    """After ``snapshot``'s derivation: the final reviews of the weeks that ended since the newest
    stored row, then the current week's (``render_latest_review``); whether any was rendered.

    Nothing when a newer snapshot exists: its own rendering follows and does the same.
    """
    if not latest_derived(snapshot):
        return False
    current = week_containing(snapshot.at)
    newest = (
        ReviewDocument.objects.filter(cluster_id=snapshot.cluster_id)
        .order_by("-week_start")
        .values_list("week_start", flat=True)
        .first()
    )
    # Without a row yet, the week before this one only: older weeks are rebuild-derived's.
    since = newest if newest is not None else current - WEEK
    weeks = weeks_with_snapshots(snapshot.cluster_id, since, current) if since < current else ()
    rendered = render_finished_weeks(snapshot.cluster, weeks, snapshot.at)
    return render_latest_review(snapshot, force) or bool(rendered)


def render_past_reviews(cluster: Cluster, since: datetime | None = None) -> list[datetime]:
    """rebuild-derived's: the final review of every week that had snapshots (from ``since``'s week) and
    ended before the newest snapshot, unless one stands; the weeks rendered."""
    newest = Snapshot.objects.usable().filter(cluster=cluster).order_by("-at").values_list("at", flat=True).first()
    if newest is None:
        return []
    start = week_containing(since) if since is not None else None
    return render_finished_weeks(cluster, weeks_with_snapshots(cluster.pk, start, week_containing(newest)), newest)


def weeks_with_snapshots(cluster_id: int, since: datetime | None, before: datetime) -> Iterator[datetime]:
    """The Mondays of the weeks with a usable snapshot in ``[since, before)``, oldest first: one query a week."""
    usable = (
        Snapshot.objects.usable()
        .filter(cluster_id=cluster_id, at__lt=before)
        .order_by("at")
        .values_list("at", flat=True)
    )
    after = since
    while (at := (usable if after is None else usable.filter(at__gte=after)).first()) is not None:
        week = week_containing(at)
        yield week
        after = week + WEEK


def render_finished_weeks(cluster: Cluster, weeks: Iterable[datetime], until: datetime) -> list[datetime]:
    """Render the final review of each of ``weeks`` that ended by ``until`` and has none standing,
    as of the first snapshot derived by this code on or after its end; the weeks rendered.

    A week with no such snapshot yet is left: readers compute it on read until one is derived.
    """
    thresholds = leak_thresholds()
    rendered = []
    for week in weeks:
        if week + WEEK > until or _final_stands(cluster.pk, week, thresholds):
            continue
        first = (
            DerivedSnapshot.objects.filter(cluster=cluster, version=DOMAIN_VERSION, at__gte=week + WEEK, at__lte=until)
            .order_by("at")
            .select_related("snapshot")
            .first()
        )
        if first is None:
            continue
        history = StoredHistory(cluster, first.at)
        source = stored_source(history)
        if source is None:  # derived by other code meanwhile
            continue
        try:
            review = weekly_review(history, week, thresholds, allocations=source)
        finally:
            history.release()  # each week reads a snapshot of its own: none is read again
        store_review(first.snapshot, week, thresholds, review)
        rendered.append(week)
    return rendered


def _final_stands(cluster_id: int, week: datetime, thresholds: Thresholds) -> bool:
    row = ReviewDocument.objects.filter(cluster_id=cluster_id, week_start=week).select_related("snapshot").first()
    return (
        row is not None
        and is_final(row)
        and row.version == DOMAIN_VERSION
        and orjson.loads(row.thresholds) == thresholds.as_dict()
    )
