"""What follows a stored snapshot: its derivation (``derived.writer``), then the renderings read
whole (``derived.rendered``, ``derived.review`` and ``derived.past_reviews``), inline or as Celery
tasks; and rebuild-derived."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db.models import Max, Min

from collector import broker
from collector.gcpause import release_snapshot
from collector.models import Cluster, Snapshot
from derived.models import DOMAIN_VERSION, DerivedSnapshot
from derived.overviews import render_latest_overview
from derived.past_reviews import render_reviews
from derived.rendered import render_latest_metrics
from derived.writer import Derivation, derive_snapshot, forget_from

log = logging.getLogger("claimline.derived")

# The tasks rendering what readers load whole, queued after a derivation when Celery runs.
RENDERINGS = ("derived.tasks.render_metrics", "derived.tasks.render_review", "derived.tasks.render_overview")


def derive_after_write(snapshot: Snapshot, inline: bool = True) -> Derivation | None:
    """The collection path's call: a derivation that fails is logged and leaves the snapshot
    underived (pages then derive on read, and the next snapshot derives every live Pod).

    ``inline=False`` (collections Celery schedules) queues ``derived.tasks.derive_cluster``
    instead: on a big cluster a churned snapshot's derivation outlasts a collection interval,
    and collecting must not wait for it with the collection lock held. /metrics and the review
    are rendered after the derivation, each by a task of its own when Celery runs, else here.
    """
    if not settings.CLAIMLINE_DERIVE:
        return None
    if not inline:
        why = broker.queue("derived.tasks.derive_cluster", snapshot.cluster_id)
        if why:
            # derive_cluster drains the backlog in order: the next collection's task derives this one too.
            log.warning(
                "cannot queue the derivation of snapshot %s of cluster %s: %s; left for the next collection's",
                snapshot.pk,
                snapshot.cluster.name,
                why,
            )
        return None
    try:
        result = _derive(snapshot)
    except Exception:
        log.exception("deriving snapshot %s of cluster %s failed", snapshot.pk, snapshot.cluster.name)
        return None
    if result is None:
        return None
    if settings.CLAIMLINE_SCHEDULER == "celery":
        for task in RENDERINGS:
            why = broker.queue(task, snapshot.pk)
            if why:
                log.warning("cannot queue %s(%s): %s; rendering in this process instead", task, snapshot.pk, why)
                render_latest(snapshot)
                break
    else:
        render_latest(snapshot)
    return result


def _derive(snapshot: Snapshot) -> Derivation | None:
    """``derive_snapshot``, then the history it loaded freed when it loaded one (``release_snapshot``)."""
    result = derive_snapshot(snapshot)
    if result is not None and (result.full or snapshot.changed):
        release_snapshot()
    return result


def render_latest(snapshot: Snapshot, force: bool = False) -> None:
    """Render /metrics, the current week's review and the overview for ``snapshot`` when it is the
    newest derived one, and the final review of a week that ended before it; a rendering that fails
    is logged (readers then render on read)."""
    rendered = False
    for what, render in (("metrics", render_latest_metrics), ("review", render_reviews)):
        try:
            rendered = render(snapshot, force) or rendered
        except Exception:
            log.exception("rendering the %s of snapshot %s failed", what, snapshot.pk)
    # Each rendering is skipped while the stored one stands for the snapshot: after a quiet checkpoint,
    # until it is its refresh interval old (what moves with time alone moves slowly). The overview
    # releases the history it read itself (``StoredHistory.release``: what it decoded goes by reference
    # counting); the full collection is left to the derivations and renderings above.
    try:
        render_latest_overview(snapshot, force)
    except Exception:
        log.exception("rendering the overview of snapshot %s failed", snapshot.pk)
    if rendered:
        release_snapshot()


def underived_snapshots(cluster_id: int) -> list[Snapshot]:
    """The usable snapshots after the newest derived one, oldest first: the derivation's backlog.

    A cluster never derived starts at its newest snapshot (older history is rebuild-derived's).
    """
    usable = Snapshot.objects.usable().filter(cluster_id=cluster_id)
    newest = DerivedSnapshot.objects.filter(cluster_id=cluster_id).order_by("-at").values_list("at", flat=True).first()
    if newest is None:
        latest = usable.order_by("-at").first()
        return [latest] if latest is not None else []
    return list(usable.filter(at__gt=newest).order_by("at"))


def derive_backlog(cluster_id: int) -> list[Derivation]:
    """Derive the newest snapshot of the backlog, covering the changes of every one before it, then
    render /metrics, the review and the overview for it; again while more arrived meanwhile.

    A watcher stores a batch a second while a derivation of a churned snapshot at 5,000 nodes takes
    seconds: deriving the backlog one snapshot at a time would fall further behind with every burst,
    while one derivation of the changes together costs about what the largest of them does. The
    snapshots between are left underived (``derived.pending``).
    """
    done = []
    while backlog := underived_snapshots(cluster_id):
        newest = backlog[-1]
        result = _derive(newest)
        if result is not None:
            done.append(result)
        render_latest(newest)
        if result is None:
            break  # not derived (not usable after all): looked at again after the next write
    return done


Progress = Callable[[int, int, Snapshot, "Derivation | None"], None]


def rebuild(cluster: Cluster, since: datetime | None = None, progress: Progress | None = None) -> int:
    """Derive the cluster's stored snapshots (from ``since``) that this code has not derived; how many.

    Resumable: snapshots derived already (or covered by a later derivation: between two derived ones)
    are skipped, up to the first that is not; from there on everything is derived again in time
    order, since later rows were derived over that gap.
    """
    runs = Snapshot.objects.usable().filter(cluster=cluster).order_by("at")
    if since is not None:
        runs = runs.filter(at__gte=since)
    derived = DerivedSnapshot.objects.filter(cluster=cluster, version=DOMAIN_VERSION)
    done = set(derived.values_list("snapshot_id", flat=True))
    # A run between two derived ones was covered by the later one's derivation (``derived.pending``).
    span = derived.aggregate(first=Min("at"), last=Max("at"))
    first, last = span["first"], span["last"]
    todo: list[Snapshot] = []
    for run in runs.iterator():
        between = first is not None and last is not None and first < run.at < last
        if todo or (run.pk not in done and not between):
            todo.append(run)
    if not todo:
        return 0
    forget_from(cluster, todo[0].at)
    for i, run in enumerate(todo, 1):
        result = _derive(run)
        if progress is not None:
            progress(i, len(todo), run, result)
    render_latest(todo[-1], force=True)
    return len(todo)
