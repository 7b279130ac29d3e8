"""Retention: pruning history keeps every as-of answer at or after the cutoff."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import CommandError, call_command
from django.db.models import Q
from django.test import override_settings
from django.utils import timezone

from claimline.celery import app, beat_schedule
from claimline.pipeline import prune_cluster
from claimline.tasks import prune_history as prune_task
from collector import history_writer as history
from collector.history_reader import NoSnapshot, StoredHistory
from collector.kinds import KINDS
from collector.models import Cluster, ObjectVersion, Snapshot
from collector.retention import PruneResult
from collector.sources import ClusterSource
from demo import builders as b
from demo.story import STAGE_SPACING, stage_times
from domain.reports.audit import audit
from domain.reports.leaks import find_leaks
from domain.verdicts.explain import explain
from tests.clusters import T0, small_cluster

pytestmark = pytest.mark.django_db


def observe(cluster: Cluster, t: datetime, since: datetime) -> dict[str, Any]:
    """Everything an as-of view at ``t`` can read, with history windows starting at ``since``."""
    try:
        h = StoredHistory(cluster, t)
    except NoSnapshot as exc:
        return {"no snapshot": str(exc)}
    return {
        "as_of": h.as_of,
        "state": {kind: h.state.objects[kind] for kind in KINDS},
        "windows": {kind: h.all_versions(kind, since=since) for kind in KINDS},
        "windows from t": {kind: h.all_versions(kind, since=t) for kind in KINDS},
    }


def chains(cluster: Cluster, t: datetime) -> dict[tuple[str, str], list[Any]]:
    h = StoredHistory(cluster, t)
    keys = set(ObjectVersion.objects.filter(cluster=cluster).values_list("kind", "uid"))
    return {(kind, uid): h.versions(kind, uid) for kind, uid in sorted(keys)}


def times_from(cutoff: datetime, snapshot_times: list[datetime]) -> list[datetime]:
    later = [t for t in snapshot_times if t >= cutoff]
    return [cutoff, cutoff + timedelta(seconds=1), *later, *(t + STAGE_SPACING / 2 for t in later)]


def import_stage(tmp_path: Path, objects: list[dict[str, Any]], at: datetime) -> None:
    dump = tmp_path / f"stage-{at.timestamp():.0f}.json"
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", at.isoformat(), stdout=StringIO())


@pytest.mark.parametrize(
    "cutoff_at",
    [
        pytest.param(lambda times: times[2], id="at-a-snapshot"),
        pytest.param(lambda times: times[2] + timedelta(minutes=4), id="between-snapshots"),
        pytest.param(lambda times: times[-1] + timedelta(days=1), id="after-the-last-snapshot"),
        pytest.param(lambda times: times[0] - timedelta(days=1), id="before-all-history"),
    ],
)
def test_as_of_queries_at_or_after_the_cutoff_answer_as_before(demo_history: datetime, cutoff_at: Any) -> None:
    cluster = Cluster.objects.get(name="demo")
    times = stage_times(demo_history)
    cutoff = cutoff_at(times)
    probes = times_from(cutoff, times)
    before = {t: observe(cluster, t, since=cutoff) for t in probes}
    chains_before = chains(cluster, probes[-1])
    versions_before, snapshots_before = ObjectVersion.objects.count(), Snapshot.objects.count()

    result = prune_cluster(cluster, cutoff)

    for t in probes:
        assert observe(cluster, t, since=cutoff) == before[t], t
    # An object's remaining versions are the tail of its history from the one valid at the cutoff.
    chains_after = chains(cluster, probes[-1])
    for key, after in chains_after.items():
        assert after == chains_before[key][-len(after):], key
        assert after[0].at <= cutoff or len(after) == len(chains_before[key]), key
    # What is left from before the cutoff are the tails of gone Pods a kept claim names (rule 3).
    old = ObjectVersion.objects.filter(
        Q(valid_to__lte=cutoff) | Q(deleted=True, valid_to__isnull=True, valid_from__lt=cutoff)
    )
    for key in set(old.values_list("kind", "uid")):
        assert key[0] == "Pod", key
        assert chains_after[key] == chains_before[key][-2:] and chains_after[key][-1].obj is None, key
    assert ObjectVersion.objects.count() == versions_before - result.versions - result.deletion_markers
    assert Snapshot.objects.count() == snapshots_before - result.snapshots
    # Objects gone before the cutoff leave history entirely; everything else keeps a tail.
    gone = set(chains_before) - set(chains_after)
    assert all(chains_before[k][-1].obj is None and chains_before[k][-1].at < cutoff for k in gone)
    if cutoff <= times[0]:
        assert (result.versions, result.deletion_markers, result.snapshots) == (0, 0, 0)
    else:
        assert result.versions > 0 and ObjectVersion.objects.count() < versions_before
    if cutoff > times[2]:  # the demo's deletions happen at stage 2
        assert result.deletion_markers == len(gone) > 0


def diagnoses(cluster: Cluster, t: datetime) -> dict[str, Any]:
    """The leaks and audit documents, and every live Pod's verdict and claim boundaries, as of ``t``."""
    h = StoredHistory(cluster, t)
    out: dict[str, Any] = {"leaks": find_leaks(h), "audit": audit(h)}
    for pod in h.state.of_kind("Pod"):
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        doc = explain(h, namespace, name)
        # Left out: incarnations gone before the cutoff, and timeline entries dated by a pruned version; and a
        # wait's estimate, whose basis is the finished holds history still keeps (pruning drops the older ones).
        claims = [{k: v for k, v in c.items() if k != "timeline"} for c in doc["claims"]]
        verdict = {k: v for k, v in doc["verdict"].items() if k not in ("wait", "estimate", "no_estimate")}
        out[f"{namespace}/{name}"] = (doc["pod"], verdict, claims)
    return out


@pytest.mark.parametrize("stage", [3, 4])
def test_diagnoses_after_the_cutoff_are_unchanged(demo_history: datetime, stage: int) -> None:
    cluster = Cluster.objects.get(name="demo")
    times = stage_times(demo_history)
    cutoff = times[stage] - timedelta(minutes=1)
    probes = [*times[stage:], times[-1] + timedelta(days=1)]
    before = {t: diagnoses(cluster, t) for t in probes}
    prune_cluster(cluster, cutoff)
    for t in probes:
        assert diagnoses(cluster, t) == before[t], t


def test_a_leaked_claims_gone_consumer_keeps_its_last_state(demo_history: datetime) -> None:
    cluster = Cluster.objects.get(name="demo")
    times = stage_times(demo_history)
    pod = ObjectVersion.objects.filter(kind="Pod", name__startswith="nightly-report-")
    assert [v.deleted for v in pod.order_by("valid_from")] == [False, False, True]
    prune_cluster(cluster, times[4])
    # Its first version goes; the Succeeded one and the deletion stay while report-gpu names the Pod.
    kept = list(pod.order_by("valid_from"))
    assert [(v.valid_from, v.deleted) for v in kept] == [(times[1], False), (times[2], True)]
    assert orjson.loads(kept[0].content)["status"]["phase"] == "Succeeded"
    # Once no kept claim names it, it goes like any other gone object.
    ObjectVersion.objects.filter(kind="ResourceClaim", name="report-gpu").delete()
    prune_cluster(cluster, times[4])
    assert not pod.exists()


def test_a_leaked_claims_gone_podgroup_keeps_its_last_state(tmp_path: Path) -> None:
    from tests import test_gangs as gangs
    from tests.snapshot_cli import AT, import_objects

    pg, claim = gangs.shared_group()
    import_objects(tmp_path, gangs.platform(gangs.SHARED, pg, claim, gangs.rank(0, claim)), AT - 2 * timedelta(hours=1))
    # PodGroups stay listed (another one), so the dump records the group's deletion.
    later = gangs.platform(gangs.SHARED, claim, gangs.rank(0, claim), b.pod_group(gangs.NS, "other", gangs.CREATED, 1))
    import_objects(tmp_path, later, AT - timedelta(hours=1))
    import_objects(tmp_path, later, AT)
    group = ObjectVersion.objects.filter(kind="PodGroup", name="ranks")
    prune_cluster(Cluster.objects.get(name="demo"), AT - timedelta(minutes=30))
    # The claim still names the group in reservedFor: its last state and its deletion stay for the leak report.
    assert [v.deleted for v in group.order_by("valid_from")] == [False, True]
    ObjectVersion.objects.filter(kind="ResourceClaim").delete()
    prune_cluster(Cluster.objects.get(name="demo"), AT - timedelta(minutes=30))
    assert not group.exists()


def test_the_snapshot_a_query_at_the_cutoff_resolves_to_is_kept(tmp_path: Path) -> None:
    objects = small_cluster()
    import_stage(tmp_path, objects, T0)
    import_stage(tmp_path, objects, T0 + timedelta(minutes=30))  # unchanged: writes no versions
    import_stage(tmp_path, objects, T0 + timedelta(hours=1))  # again
    cluster = Cluster.objects.get(name="demo")
    failed = history.start_snapshot(cluster, T0 + timedelta(hours=2), "test", T0 + timedelta(hours=2))
    history.fail_snapshot(failed, "boom", T0 + timedelta(hours=2))
    later = copy.deepcopy(objects)
    later.remove(next(o for o in later if o["kind"] == "ResourceClaim"))
    import_stage(tmp_path, later, T0 + timedelta(hours=3))
    cutoff = T0 + timedelta(hours=2, minutes=30)
    before = observe(cluster, cutoff, since=cutoff)

    result = prune_cluster(cluster, cutoff)

    assert observe(cluster, cutoff, since=cutoff) == before
    assert before["as_of"] == T0 + timedelta(hours=1)
    # The failed run and the empty run before the anchor go; the first import stays because
    # unchanged objects still point at it.
    assert result.snapshots == 2
    assert list(Snapshot.objects.order_by("at").values_list("at", flat=True)) == [
        T0, T0 + timedelta(hours=1), T0 + timedelta(hours=3)
    ]


def test_running_snapshots_are_left_for_the_next_collection_to_close(tmp_path: Path) -> None:
    import_stage(tmp_path, small_cluster(), T0)
    cluster = Cluster.objects.get(name="demo")
    Snapshot.objects.create(cluster=cluster, at=T0 + timedelta(hours=1), started=T0, source="killed")
    import_stage(tmp_path, small_cluster(), T0 + timedelta(hours=2))
    assert Snapshot.objects.filter(status="failed").count() == 1  # the import closed it
    Snapshot.objects.create(cluster=cluster, at=T0 + timedelta(hours=3), started=T0, source="running")
    prune_cluster(cluster, T0 + timedelta(days=1))
    assert set(Snapshot.objects.values_list("status", flat=True)) == {"ok", "running"}


def test_a_collection_after_pruning_continues_the_same_history(demo_history: datetime, tmp_path: Path) -> None:
    from demo.story import demo_snapshots

    cluster = Cluster.objects.get(name="demo")
    prune_cluster(cluster, demo_history)
    _, last = demo_snapshots(demo_history)[-1]
    import_stage(tmp_path, last, demo_history + timedelta(minutes=10))
    latest = Snapshot.objects.order_by("-at").first()
    assert latest is not None
    assert (latest.status, latest.versions_written, latest.deletions) == ("ok", 0, 0)


def test_dry_run_counts_what_a_run_deletes(demo_history: datetime) -> None:
    cluster = Cluster.objects.get(name="demo")
    cutoff = stage_times(demo_history)[3]
    counts = (ObjectVersion.objects.count(), Snapshot.objects.count())
    planned = prune_cluster(cluster, cutoff, dry_run=True)
    assert (ObjectVersion.objects.count(), Snapshot.objects.count()) == counts
    done = prune_cluster(cluster, cutoff, batch=7)  # small batches: several transactions
    assert (planned.versions, planned.deletion_markers, planned.snapshots) == (
        done.versions, done.deletion_markers, done.snapshots
    )
    assert planned.dry_run and not done.dry_run
    again = prune_cluster(cluster, cutoff)
    assert (again.versions, again.deletion_markers, again.snapshots) == (0, 0, 0)


def test_only_the_named_cluster_is_pruned(demo_history: datetime, tmp_path: Path) -> None:
    other_objects = small_cluster()
    dump = tmp_path / "other.json"
    dump.write_bytes(b.dump_json(other_objects))
    for hours in (0, 1):
        if hours:
            other_objects[-2]["metadata"]["labels"] = {"changed": "yes"}
            dump.write_bytes(b.dump_json(other_objects))
        at = (demo_history - timedelta(days=1) + timedelta(hours=hours)).isoformat()
        call_command("import-snapshot", str(dump), "--at", at, "--cluster", "other", stdout=StringIO())
    other = ObjectVersion.objects.filter(cluster__name="other").count()
    prune_cluster(Cluster.objects.get(name="demo"), demo_history)
    assert ObjectVersion.objects.filter(cluster__name="other").count() == other


def test_naive_cutoff_is_refused(demo_history: datetime) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        prune_cluster(Cluster.objects.get(name="demo"), demo_history.replace(tzinfo=None))


# --- the command, the task and the schedule ---------------------------------------------------------


def recent_history(tmp_path: Path, now: datetime) -> None:
    """Three imports 10 days, 5 days and 1 hour before ``now``; a claim disappears at -5 days."""
    objects = small_cluster()
    import_stage(tmp_path, objects, now - timedelta(days=10))
    changed = copy.deepcopy(objects)
    changed.remove(next(o for o in changed if o["kind"] == "ResourceClaim"))
    import_stage(tmp_path, changed, now - timedelta(days=5))
    import_stage(tmp_path, changed, now - timedelta(hours=1))


def test_command_prunes_older_than_days(tmp_path: Path) -> None:
    recent_history(tmp_path, timezone.now())
    total = ObjectVersion.objects.count()
    out = StringIO()
    call_command("prune-history", "--days", "3", "--dry-run", stdout=out)
    assert "demo: history before" in out.getvalue() and "would delete 1 versions, 1 deletion markers" in out.getvalue()
    assert ObjectVersion.objects.count() == total
    out = StringIO()
    call_command("prune-history", "--days", "3", "--cluster", "demo", stdout=out)
    assert "deleted 1 versions, 1 deletion markers, 0 snapshots" in out.getvalue()
    assert ObjectVersion.objects.count() == total - 2


def test_command_default_is_the_retention_setting(tmp_path: Path) -> None:
    recent_history(tmp_path, timezone.now())
    out = StringIO()
    with override_settings(CLAIMLINE_RETENTION_DAYS=30):
        call_command("prune-history", stdout=out)
    assert "deleted 0 versions" in out.getvalue()
    with override_settings(CLAIMLINE_RETENTION_DAYS=4):
        call_command("prune-history", stdout=out)
    assert "deleted 1 versions" in out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--cluster", "nope"], "no stored history for cluster 'nope'"), (["--days", "0"], "at least 1")],
)
def test_command_refuses_bad_arguments(tmp_path: Path, args: list[str], message: str) -> None:
    recent_history(tmp_path, timezone.now())
    with pytest.raises(CommandError, match=message):
        call_command("prune-history", *args, stdout=StringIO())


def test_task_prunes_every_stored_cluster(tmp_path: Path) -> None:
    recent_history(tmp_path, timezone.now())
    with override_settings(CLAIMLINE_RETENTION_DAYS=3):
        lines = prune_task.run()
    assert len(lines) == 1 and "demo: history before" in lines[0] and "deleted 1 versions" in lines[0]


def test_beat_prunes_daily_and_a_late_prune_expires() -> None:
    schedule = beat_schedule([ClusterSource("a", "demo")], 30, prune=True)
    assert sorted(schedule) == ["collect-a", "prune-history"]
    entry = schedule["prune-history"]
    assert entry["task"] == "collector.tasks.prune_history" and entry["task"] in app.tasks
    assert entry["options"]["expires"] < 24 * 3600
    # A crontab: once a day at a fixed time, however often beat restarts.
    assert entry["schedule"].hour == {3} and entry["schedule"].minute == {17}


def test_prune_result_describes_itself() -> None:
    at = T0
    assert PruneResult("demo", at, 3, 2, 1).describe() == (
        f"demo: history before {at.isoformat()}: deleted 3 versions, 2 deletion markers, 1 snapshots"
    )
    assert "would delete" in PruneResult("demo", at, 0, 0, 0, dry_run=True).describe()

