"""The derived layer: written by import-snapshot and collection, read by pages, rebuilt on demand."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from django.test import Client

from claimline.pipeline import collect_and_derive
from collector.history_reader import StoredHistory
from collector.models import Cluster, ObjectVersion, Snapshot
from collector.sources import ClusterSource
from demo import builders as b
from demo.story import DEMO_BASE, demo_snapshots
from derived.documents import unpack
from derived.event_lookups import write_event_subjects
from derived.models import (
    AllocationSpan,
    AuditReport,
    DerivedSnapshot,
    EventSubject,
    MetricsText,
    PodExplanation,
)
from derived.reading import covers, device_history_read, stored_explain
from derived.thresholds import leak_thresholds
from domain.inventory.device_history import DeviceIndex, device_history
from tests.clusters import T0, small_cluster
from tests.derived_checks import (
    assert_layer_matches_derivation,
    assert_review_matches_derivation,
    edit_stored_document,
)
from tests.scenarios import SCENARIOS

pytestmark = pytest.mark.django_db

CASES = sorted(p.parent.name for p in SCENARIOS.glob("*/expected.json")) if SCENARIOS.is_dir() else []
POD = ("ml-training", "jupyter-alice-0")


def import_story(tmp_path: Path) -> list[Any]:
    times = []
    for i, (at, objects) in enumerate(demo_snapshots(DEMO_BASE)):
        dump = tmp_path / f"stage-{i}.json"
        dump.write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", at.isoformat())
        times.append(at)
    return times


def test_demo_story_reads_the_same_from_the_layer(demo_history: Any) -> None:
    assert DerivedSnapshot.objects.count() == 5
    assert assert_layer_matches_derivation("demo") > 0
    # The demo's reviews count leaks, and GPU-equivalents below device-hours (its partitioned and shared GPUs).
    compared = assert_review_matches_derivation("demo")
    assert compared["leaked"] > 0 and 0 < compared["equivalent"] < compared["allocated"]


@pytest.mark.skipif(not CASES, reason="../shared/scenarios is not beside this checkout")
@pytest.mark.parametrize("name", CASES)
def test_shared_scenario_reads_the_same_from_the_layer(name: str) -> None:
    folder = SCENARIOS / name
    for file, at in json.loads((folder / "expected.json").read_text())["snapshots"]:
        call_command("import-snapshot", str(folder / file), "--at", at)
    assert assert_layer_matches_derivation("demo") > 0
    assert assert_review_matches_derivation("demo")["reviews"] > 0
    assert PodExplanation.objects.exists()


def test_an_unchanged_snapshot_derives_nothing(tmp_path: Path) -> None:
    dump = tmp_path / "cluster.json"
    dump.write_bytes(b.dump_json(small_cluster()))
    call_command("import-snapshot", str(dump), "--at", T0.isoformat())
    rows = PodExplanation.objects.count()
    call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(minutes=1)).isoformat())
    first, second = DerivedSnapshot.objects.order_by("at")
    assert first.full and first.pods_derived > 0 and rows > 0
    assert not second.full and (second.pods_derived, second.rows_written) == (0, 0)
    assert PodExplanation.objects.count() == rows
    assert assert_layer_matches_derivation("demo") > 0


def test_an_unchanged_snapshot_decodes_no_object(tmp_path: Path) -> None:
    """Every 30 s at 5,000 nodes: reading anything whole (every live claim was, once) costs a third of a second."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from derived.writer import derive_snapshot, forget_from

    dump = tmp_path / "cluster.json"
    dump.write_bytes(b.dump_json(small_cluster()))
    call_command("import-snapshot", str(dump), "--at", T0.isoformat())
    call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(minutes=1)).isoformat())
    unchanged = Snapshot.objects.order_by("at").last()
    assert unchanged is not None and not unchanged.changed
    forget_from(unchanged.cluster, unchanged.at)
    with CaptureQueriesContext(connection) as queries:
        derive_snapshot(unchanged)
    read = [q["sql"] for q in queries.captured_queries if "collector_objectversion" in q["sql"]]
    assert not [sql for sql in read if '"content"' in sql.split("FROM")[0]], read


def test_the_device_classes_page_reads_the_stored_counts(demo_history: Any, admin_client: Client) -> None:
    """Counted when the inventory changed, not on the page's first request of a snapshot."""
    from derived.models import ClassMatches

    head = ClassMatches.objects.get(cluster__name="demo", valid_to__isnull=True)
    counts = orjson.loads(head.document)
    assert counts and all(c["total"] > 0 for c in counts.values())
    name = sorted(counts)[0]
    counts[name]["matched"] = 4242
    ClassMatches.objects.filter(pk=head.pk).update(document=orjson.dumps(counts).decode())
    page = admin_client.get("/c/demo/classes/", secure=True)
    assert page.status_code == 200 and "4242" in page.content.decode()


def test_a_changed_snapshots_events_are_decoded_once(demo_history: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup's writer decodes the snapshot's Event versions and says what each is about; only an
    Event the snapshot deleted is read again (from its last content) to find the Pods it touched."""
    from derived import writer

    changed = [s for s in Snapshot.objects.order_by("at") if s.versions.filter(kind="Event", deleted=False).exists()]
    snapshot = changed[-1]
    read_again: list[tuple[str, str, bool]] = []
    original = writer._involved

    def recording(cluster_id: int, events: list[tuple[str, str, bool]]) -> Any:
        read_again.extend(events)
        return original(cluster_id, events)

    monkeypatch.setattr(writer, "_involved", recording)
    writer.forget_from(snapshot.cluster, snapshot.at)
    assert writer.derive_snapshot(snapshot) is not None
    assert all(gone for _uid, _ns, gone in read_again), read_again
    assert assert_layer_matches_derivation("demo") > 0
    # Told what the Events are about, it finds the Pods it finds reading them itself.
    told = write_event_subjects(snapshot)
    assert told and writer.affected_pods(snapshot, told) == writer.affected_pods(snapshot)


def test_collection_derives_what_it_stored(source: ClusterSource, make_reader: Any) -> None:
    snapshot = collect_and_derive(source, T0, lambda: T0 + timedelta(seconds=5), reader=make_reader())
    assert snapshot.status == Snapshot.Status.OK
    assert DerivedSnapshot.objects.filter(snapshot=snapshot).exists()
    assert assert_layer_matches_derivation("test") > 0


def _message_from_the_layer(doc: dict[str, Any]) -> None:
    doc["verdict"]["message"] = "read from the derived layer"


def test_pages_read_the_stored_document(demo_history: Any, admin_client: Client) -> None:
    """A row edited behind the layer's back shows: the Pod page, the API and the CLI read rows."""
    for row in PodExplanation.objects.filter(namespace=POD[0], name=POD[1], valid_to__isnull=True):
        edit_stored_document(row, _message_from_the_layer)
    api = admin_client.get("/api/explain", {"pod": "/".join(POD)}, secure=True).json()
    assert api["verdict"]["message"] == "read from the derived layer"
    page = admin_client.get(f"/c/demo/pods/{POD[0]}/{POD[1]}/", secure=True)
    assert "read from the derived layer" in page.content.decode()
    MetricsText.objects.update(text="# rendered by the derivation\n")
    assert admin_client.get("/metrics", secure=True).content.decode().startswith("# rendered by the derivation\n# HELP")


def test_metrics_are_rendered_when_something_changed_or_the_text_is_old(tmp_path: Path, settings: Any) -> None:
    """An unchanged snapshot keeps the text of the one before while it is younger than
    CLAIMLINE_METRICS_REFRESH (it says which snapshot it describes); a change renders at once."""
    settings.CLAIMLINE_METRICS_REFRESH = 120
    objects = small_cluster()
    dump = tmp_path / "cluster.json"
    dump.write_bytes(b.dump_json(objects))

    def imported(at: datetime) -> datetime:
        call_command("import-snapshot", str(dump), "--at", at.isoformat())
        return MetricsText.objects.select_related("snapshot").get().snapshot.at

    def describes(rendered_from: datetime, at: datetime) -> bool:
        return rendered_from == at

    assert describes(imported(T0), T0)
    assert describes(imported(T0 + timedelta(minutes=1)), T0)  # only time moved, a minute
    assert describes(imported(T0 + timedelta(minutes=2)), T0 + timedelta(minutes=2))  # the text was 120 s old
    claim = next(o for o in objects if o["kind"] == "ResourceClaim")
    claim["status"]["reservedFor"] = []
    dump.write_bytes(b.dump_json(objects))
    assert describes(imported(T0 + timedelta(minutes=2, seconds=30)), T0 + timedelta(minutes=2, seconds=30))
    assert assert_layer_matches_derivation("demo") > 0
    settings.CLAIMLINE_METRICS_REFRESH = 0  # every snapshot rendered
    assert describes(imported(T0 + timedelta(minutes=3)), T0 + timedelta(minutes=3))


def test_metrics_serve_the_newest_snapshots_time_and_an_age_computed_when_scraped(
    tmp_path: Path, settings: Any, admin_client: Client
) -> None:
    """The text of an earlier snapshot stands for a later one that changed nothing, but the snapshot's
    time and age are the later one's, the age counted at the scrape: it never saw-tooths with
    CLAIMLINE_METRICS_REFRESH. Links are absolute with CLAIMLINE_BASE_URL."""
    settings.CLAIMLINE_METRICS_REFRESH = 120
    settings.CLAIMLINE_BASE_URL = "https://claimline.example.com"
    dump = tmp_path / "cluster.json"
    dump.write_bytes(b.dump_json(small_cluster()))
    call_command("import-snapshot", str(dump), "--at", T0.isoformat())
    later = T0 + timedelta(minutes=1)
    call_command("import-snapshot", str(dump), "--at", later.isoformat())
    assert MetricsText.objects.select_related("snapshot").get().snapshot.at == T0  # the text stands
    before = datetime.now(later.tzinfo)
    text = admin_client.get("/metrics", secure=True).content.decode()
    after = datetime.now(later.tzinfo)
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert float(lines["claimline_as_of_timestamp_seconds"]) == later.timestamp()
    age = float(lines["claimline_snapshot_age_seconds"])
    assert (before - later).total_seconds() - 1 <= age <= (after - later).total_seconds() + 1
    assert lines['claimline_dashboard_info{url="https://claimline.example.com/c/demo/"}'] == "1"
    assert text.count("# TYPE claimline_as_of_timestamp_seconds ") == 1


def test_metrics_text_stored_by_an_earlier_version_is_served_without_its_own_snapshot_time(
    demo_history: Any, admin_client: Client
) -> None:
    """Stored before the snapshot's time moved to serving, a text starts with it: served once."""
    old = "# HELP claimline_as_of_timestamp_seconds x\n# TYPE claimline_as_of_timestamp_seconds gauge\n"
    MetricsText.objects.update(text=old + "claimline_as_of_timestamp_seconds 1\n# HELP claimline_claims y\n")
    text = admin_client.get("/metrics", secure=True).content.decode()
    assert text.startswith("# HELP claimline_claims y\n")
    assert text.count("# TYPE claimline_as_of_timestamp_seconds ") == 1
    assert "claimline_as_of_timestamp_seconds 1\n" not in text


def test_history_from_before_the_layer_is_read_the_old_way_until_rebuilt(
    tmp_path: Path, settings: Any, admin_client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    settings.CLAIMLINE_DERIVE = False
    times = import_story(tmp_path)
    cluster = Cluster.objects.get(name="demo")
    history = StoredHistory(cluster, times[-1])
    assert not covers(history) and stored_explain(history, *POD) is None
    before = admin_client.get("/api/explain", {"pod": "/".join(POD)}, secure=True).json()

    call_command("rebuild-derived", "--since", times[2].isoformat())
    out = capsys.readouterr().out
    assert "[1/3]" in out and "[3/3]" in out and "every live Pod" in out
    assert DerivedSnapshot.objects.count() == 3
    assert admin_client.get("/api/explain", {"pod": "/".join(POD)}, secure=True).json() == before

    # Resumed from the first snapshot not derived: everything after it is derived again, in order.
    call_command("rebuild-derived")
    assert "[5/5]" in capsys.readouterr().out
    assert assert_layer_matches_derivation("demo") > 0
    rows = list(PodExplanation.objects.order_by("pk").values_list("pk", "content_hash"))
    call_command("rebuild-derived", "--cluster", "demo")
    assert "every snapshot is derived already" in capsys.readouterr().out
    assert list(PodExplanation.objects.order_by("pk").values_list("pk", "content_hash")) == rows


def test_rows_derived_by_other_domain_code_are_not_read(demo_history: Any) -> None:
    cluster = Cluster.objects.get(name="demo")
    DerivedSnapshot.objects.update(version="0123456789abcdef")
    history = StoredHistory(cluster)
    assert not covers(history) and stored_explain(history, *POD) is None
    call_command("rebuild-derived")
    assert covers(history)
    assert assert_layer_matches_derivation("demo") > 0


def test_a_snapshot_after_a_gap_derives_the_changes_of_the_gap(tmp_path: Path, settings: Any) -> None:
    """The snapshots the derivation skipped are covered by the next one, which derives what they changed
    (not every live Pod); each of them is read the old way, and answers as a derivation of it would."""
    stages = demo_snapshots(DEMO_BASE)
    for i, (at, objects) in enumerate(stages):
        settings.CLAIMLINE_DERIVE = i in (0, 4)
        dump = tmp_path / f"gap-{i}.json"
        dump.write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", at.isoformat(), "--cluster", "gap")
    last = DerivedSnapshot.objects.get(at=stages[-1][0])
    assert not last.full and last.coalesced == 3
    assert DerivedSnapshot.objects.filter(cluster__name="gap").count() == 2
    history = StoredHistory(Cluster.objects.get(name="gap"))
    assert covers(history)
    assert assert_layer_matches_derivation("gap", derived_only=True) > 0
    # Every incarnation has the row its last change asked for: what deriving each snapshot leaves open.
    def open_rows(cluster: str) -> set[tuple[str, str]]:
        rows = PodExplanation.objects.filter(cluster__name=cluster, valid_to__isnull=True)
        return set(rows.values_list("pod_uid", "content_hash"))

    settings.CLAIMLINE_DERIVE = True
    for i, (at, _objects) in enumerate(stages):
        call_command("import-snapshot", str(tmp_path / f"gap-{i}.json"), "--at", at.isoformat(), "--cluster", "each")
    assert DerivedSnapshot.objects.filter(cluster__name="each").count() == len(stages)
    assert open_rows("gap") == open_rows("each")


def _without_wait(verdict: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in verdict.items() if k not in ("wait", "estimate", "no_estimate")}


def _holders(verdict: dict[str, Any]) -> list[str]:
    return [h["uid"] for h in (verdict.get("wait") or {}).get("holders", [])]


def test_pruning_drops_derived_documents_no_later_query_reads(tmp_path: Path) -> None:
    """Rows that ended by the cutoff go; the rest still answer with explain's verdicts (their
    timelines may keep entries of versions pruning removed, which on-read derivation loses)."""
    from claimline.pipeline import prune_cluster
    from domain.verdicts.explain import PodNotFound, explain

    times = import_story(tmp_path)
    cutoff = times[3] + timedelta(minutes=1)
    assert PodExplanation.objects.filter(valid_to__lte=cutoff).exists()
    assert AllocationSpan.objects.filter(end__lte=cutoff).exists()
    prune_cluster(Cluster.objects.get(name="demo"), cutoff)
    assert not PodExplanation.objects.filter(valid_to__lte=cutoff).exists()
    assert not AllocationSpan.objects.filter(end__lte=cutoff).exists()
    history = StoredHistory(Cluster.objects.get(name="demo"))
    for namespace, name in PodExplanation.objects.values_list("namespace", "name").distinct():
        if not ObjectVersion.objects.filter(kind="Pod", namespace=namespace, name=name).exists():
            # A Pod deleted with its claim before the cutoff (the sweep's earlier trials) is pruned whole:
            # the layer does not know it either.
            with pytest.raises(PodNotFound):
                stored_explain(history, namespace, name)
            continue
        stored = stored_explain(history, namespace, name)
        assert stored is not None
        judged = explain(history, namespace, name)["verdict"]
        # A wait counts its holders' kin's finished holds, and pruning drops the claims gone by the cutoff
        # with their holds (the stored document counted them): the same holders, maybe fewer past holds.
        assert _without_wait(stored["verdict"]) == _without_wait(judged), (namespace, name)
        assert _holders(stored["verdict"]) == _holders(judged), (namespace, name)
    # The device pages' lookups name more than the pruned history keeps: the answer is the same.
    on_read = StoredHistory(Cluster.objects.get(name="demo"))
    index = DeviceIndex.of(on_read)
    assert index.holdings
    for device in index.holdings:
        assert device_history_read(history, device) == device_history(on_read, device, index), device
    events = set(ObjectVersion.objects.filter(kind="Event").values_list("uid", flat=True))
    assert set(EventSubject.objects.values_list("event_uid", flat=True)) <= events


def test_verdicts_that_move_with_time_are_derived_again_at_every_snapshot(tmp_path: Path) -> None:
    """A binding wait counts toward the scheduler's timeout: unchanged objects, a new message,
    and past the timeout binding-failed; the stored documents follow."""
    from tests.test_binding_conditions import T0 as BIND_T0
    from tests.test_binding_conditions import cluster, held_in_prebind

    dump = tmp_path / "prebind.json"
    dump.write_bytes(b.dump_json([*cluster(), *held_in_prebind(BIND_T0 - timedelta(minutes=2))]))
    for minutes in (0, 1, 9):
        call_command("import-snapshot", str(dump), "--at", (BIND_T0 + timedelta(minutes=minutes)).isoformat())
    reasons = [
        unpack(content, dictionary)["verdict"]["reason"]
        for content, dictionary in PodExplanation.objects.order_by("valid_from").values_list("content", "dictionary")
    ]
    assert reasons == ["binding-pending", "binding-pending", "binding-failed"]
    assert assert_layer_matches_derivation("demo") == 3


def test_with_celery_metrics_are_rendered_by_a_task_of_their_own(tmp_path: Path, settings: Any) -> None:
    """Rendering can outlast a collection: never inline then, and only for the newest snapshot."""
    from derived.tasks import render_metrics

    settings.CLAIMLINE_SCHEDULER = "celery"
    dump = tmp_path / "cluster.json"
    dump.write_bytes(b.dump_json(small_cluster()))
    for minutes in (0, 1):
        call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(minutes=minutes)).isoformat())
    assert DerivedSnapshot.objects.count() == 2 and not MetricsText.objects.exists()
    first, second = Snapshot.objects.order_by("at")
    assert render_metrics(first.pk) == "skipped"
    assert render_metrics(second.pk) == "rendered"
    assert MetricsText.objects.get().snapshot == second


def test_with_celery_a_collection_queues_its_derivation_instead_of_waiting_for_it(
    source: ClusterSource, make_reader: Any, settings: Any
) -> None:
    """A churned snapshot of a big cluster takes longer to derive than a collection interval."""
    import redis

    settings.CLAIMLINE_SCHEDULER = "celery"
    queue = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queue.delete("celery")
    snapshot = collect_and_derive(source, T0, lambda: T0, reader=make_reader())
    assert snapshot.status == "ok" and not DerivedSnapshot.objects.exists()
    [message] = [json.loads(m) for m in queue.lrange("celery", 0, -1)]
    queue.delete("celery")
    assert message["headers"]["task"] == "derived.tasks.derive_cluster"
    assert message["headers"]["argsrepr"] == f"({snapshot.cluster_id},)"


def test_the_derivation_task_derives_the_backlog_as_one_once_per_cluster(tmp_path: Path, settings: Any) -> None:
    from collector.locks import redis_lock
    from derived.tasks import derive_cluster

    dump = tmp_path / "cluster.json"
    objects = small_cluster()
    for minutes in range(3):
        settings.CLAIMLINE_DERIVE = minutes == 0  # the first is derived; two queue up behind it
        objects = [*objects, b.namespace(f"team-{minutes}")]
        dump.write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(minutes=minutes)).isoformat())
    settings.CLAIMLINE_DERIVE = True
    cluster = Cluster.objects.get(name="demo")
    assert DerivedSnapshot.objects.count() == 1

    held = redis_lock(f"claimline:derive:{cluster.pk}")
    assert held.acquire(blocking=False)
    try:
        assert derive_cluster(cluster.pk) == "skipped"  # the holder drains the backlog
    finally:
        held.release()
    assert derive_cluster(cluster.pk) == "derived 1 snapshots"  # the newest, covering the one before it
    derived = DerivedSnapshot.objects.order_by("at").values_list("full", "coalesced", "snapshot__at")
    assert list(derived) == [(True, 0, T0), (False, 1, T0 + timedelta(minutes=2))]
    assert MetricsText.objects.get().snapshot == Snapshot.objects.order_by("at").last()
    assert derive_cluster(cluster.pk) == "derived 0 snapshots"
    assert assert_layer_matches_derivation("demo", derived_only=True) > 0


def test_the_overview_reads_the_waiting_pods_verdicts_and_the_chart_from_the_layer(demo_history: Any, admin_client: Client) -> None:
    """The home page reads no Pod when the layer covers the snapshot, and says the same (checked at
    every snapshot of every history by derived_checks)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from derived.reading import overview_read
    from domain.reports.redaction import Redactor, Scope

    for at in [t for t, _ in demo_snapshots(DEMO_BASE)]:
        history = StoredHistory(Cluster.objects.get(name="demo"), at)
        with CaptureQueriesContext(connection) as ctx:
            overview_read(history, Redactor(Scope(admin=True), ()), leak_thresholds())
        # Whole kinds are read through a cursor: never the Pods (the demo's partitioned GPUs make the
        # chart's fractions read the inventory, whose slices and claims are read then).
        whole = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("DECLARE")]
        assert whole and not [q for q in whole if "'Pod'" in q]
    pending = "research/llm-finetune"
    # The overview shows a waiting Pod's verdict sentence from its row's column, its document unread.
    rows = PodExplanation.objects.filter(namespace="research", name="llm-finetune", valid_to__isnull=True, waiting=True)
    assert rows.update(message="read from the derived layer") == 1
    page = admin_client.get("/c/demo/", secure=True).content.decode()
    assert pending in page and "read from the derived layer" in page


def test_the_history_before_a_snapshot_is_rewound_from_it_not_read_again(demo_history: Any) -> None:
    """A Pod deleted by a snapshot is judged just before it: that state is the later one with the
    snapshot's versions undone, and equals the earlier snapshot's state read afresh."""
    cluster = Cluster.objects.get(name="demo")
    times = list(Snapshot.objects.filter(cluster=cluster).order_by("at").values_list("at", flat=True))
    assert len(times) > 2
    for earlier_at, later_at in zip(times, times[1:], strict=False):
        later = StoredHistory(cluster, later_at)
        later.state.objects.keys()  # every kind decoded, as a derivation has by the time it judges deleted Pods
        rewound = later.before(later_at)
        fresh = StoredHistory(cluster, earlier_at)
        assert rewound.as_of == fresh.as_of == earlier_at
        assert dict.keys(rewound.state.objects) == dict.keys(later.state.objects)
        for kind in dict.keys(later.state.objects):
            assert rewound.state.objects[kind] == fresh.state.objects[kind], kind
        assert later.state.objects != rewound.state.objects  # the story changes something at every step


def test_the_audit_is_read_from_its_row_and_derived_only_when_something_it_reads_changed(
    tmp_path: Path, admin_client: Client
) -> None:
    objects = small_cluster()
    dump = tmp_path / "cluster.json"

    def imported(minutes: int) -> None:
        dump.write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(minutes=minutes)).isoformat())

    imported(0)
    imported(1)  # unchanged
    pod = next(o for o in objects if o["kind"] == "Pod" and o["spec"].get("resourceClaims"))
    objects.append(b.event(pod, "Pulled", "Container image pulled", T0, type="Normal"))
    imported(2)  # an Event: nothing the audit reads
    assert AuditReport.objects.count() == 1
    objects.append(b.namespace("debug", admin_access=True))
    imported(3)  # a Namespace labelled for adminAccess: a warning from then on
    first, second = AuditReport.objects.order_by("valid_from")
    assert first.valid_to == second.valid_from == T0 + timedelta(minutes=3) and second.valid_to is None
    assert "admin-access-namespace" not in first.warnings and "debug" in second.warnings
    assert assert_layer_matches_derivation("demo") > 0

    head = AuditReport.objects.get(valid_to__isnull=True)
    head.warnings = orjson.dumps([{"kind": "edited-behind-the-layer", "subject": "worker-0", "message": "x"}]).decode()
    head.save()
    assert admin_client.get("/api/audit", secure=True).json()["warnings"][0]["kind"] == "edited-behind-the-layer"
    assert "edited-behind-the-layer" in admin_client.get("/c/demo/audit/", secure=True).content.decode()


def test_the_leak_report_reads_only_the_stored_candidates(demo_history: Any, admin_client: Client) -> None:
    """The demo's retained claims are flagged from the stored candidates alone, as on read; a claim
    left out of the candidates is not reported (the report reads no other claim)."""
    from derived.models import LeakCandidates
    from derived.reports import leaks_read
    from derived.thresholds import leak_thresholds
    from domain.reports.leaks import find_leaks

    cluster = Cluster.objects.get(name="demo")
    on_read = find_leaks(StoredHistory(cluster), leak_thresholds())
    flagged = [c["uid"] for c in on_read["claims"]]
    assert flagged
    head = LeakCandidates.objects.get(cluster=cluster, valid_to__isnull=True)
    assert set(flagged) <= set(head.claim_uids.split())
    assert leaks_read(StoredHistory(cluster), leak_thresholds()) == on_read
    head.claim_uids = " ".join(u for u in head.claim_uids.split() if u != flagged[0])
    head.save()
    api = admin_client.get("/api/leaks", secure=True).json()
    assert flagged[0] not in [c["uid"] for c in api["claims"]] and len(api["claims"]) == len(flagged) - 1


def test_a_derivation_that_loaded_a_snapshot_frees_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A history and its inventory refer to each other: only a full collection frees what they decoded,
    so the pipeline runs one after a derivation or rendering that loaded a snapshot, and not otherwise."""
    from derived import pipeline

    released: list[int] = []
    monkeypatch.setattr(pipeline, "release_snapshot", lambda: released.append(1))
    objects = small_cluster()
    dump = tmp_path / "cluster.json"
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", T0.isoformat())
    assert len(released) == 2  # the first (full) derivation, then the renderings
    call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(seconds=30)).isoformat())
    assert len(released) == 2  # unchanged: nothing loaded, nothing rendered


def test_a_derivation_and_its_renderings_release_what_they_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left to the cyclic collector, a 5,000-node snapshot's objects cost a 2.4 s full collection: the
    derivation and the renderings empty their histories, so reference counting frees them at once."""
    import gc

    from derived import pipeline

    monkeypatch.setattr(pipeline, "release_snapshot", lambda: None)  # the collection this makes cheap
    objects = small_cluster()
    dump = tmp_path / "cluster.json"
    dump.write_bytes(b.dump_json(objects))
    gc.collect()
    gc.disable()
    try:
        # Its own process's objects aside (Django's, the import's), what is left for the collector.
        call_command("import-snapshot", str(dump), "--at", T0.isoformat(), "--cluster", "released")
        left = gc.collect()
    finally:
        gc.enable()
    # Measured when written: 225 containers left (Django's and the import's own cycles), 635 without
    # the releases; the difference is the 16 objects' decoded copies and what was derived from them.
    assert left < 300, left


def test_an_incarnation_deleted_earlier_is_not_judged_again(tmp_path: Path) -> None:
    """Its document never changes, and judging it reads the cluster as of its deletion: a change to its
    claim later (here the claim it left behind loses its reservation) derives the live Pods only."""
    from derived.writer import affected_pods

    objects = small_cluster()
    dump = tmp_path / "cluster.json"
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", T0.isoformat())
    gone = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "train-0")
    objects.remove(gone)
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(minutes=1)).isoformat())
    claim = next(o for o in objects if o["kind"] == "ResourceClaim" and o["metadata"]["name"] == "train-0-gpu")
    claim["status"]["reservedFor"] = []
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(minutes=2)).isoformat())
    second, third = Snapshot.objects.order_by("at")[1:]
    uid = gone["metadata"]["uid"]
    assert uid in affected_pods(second)  # deleted by it: judged once more, as it last was
    assert uid not in affected_pods(third)
    # Its row stays open, marked not live: a changed claim's Pods are looked up among the live ones.
    assert PodExplanation.objects.filter(pod_uid=uid, valid_to__isnull=True, live=False).exists()
    assert assert_layer_matches_derivation("demo") > 0


def _churned_history(tmp_path: Path, cluster: str, steps: int) -> Snapshot:
    """``small_cluster`` and then ``steps`` snapshots each replacing a job Pod (its claim and Event
    with it), then one more; returns that last snapshot with its derivation forgotten."""
    from derived.writer import forget_from

    objects = small_cluster()
    dump = tmp_path / "cluster.json"

    def job(i: int) -> list[dict[str, Any]]:
        started = T0 + timedelta(minutes=i)
        pod = b.pod(
            "team-a", f"job-{i}", started, claims=[("gpu", {"claim": f"job-{i}-gpu"})], node_name="worker-1",
            phase="Running", conditions=b.running_conditions(started, started),
            container_state=b.state_running(started),
        )
        claim = b.claim(
            "team-a", f"job-{i}-gpu", [b.request()], started, allocated=[("gpu", "worker-1", "gpu-3")],
            allocated_at=started, reserved_for=[pod],
        )
        return [pod, claim, b.event(pod, "Started", "Started container main", started, type="Normal")]

    current: list[dict[str, Any]] = []
    for i in range(steps + 1):
        current = job(i)
        dump.write_bytes(b.dump_json(objects + current))
        call_command(
            "import-snapshot", str(dump), "--at", (T0 + timedelta(minutes=i)).isoformat(), "--cluster", cluster
        )
    last = Snapshot.objects.filter(cluster__name=cluster).order_by("-at").first()
    assert last is not None
    forget_from(last.cluster, last.at)
    return last


@pytest.mark.parametrize("bulk_after", [32, 1])
def test_a_churned_derivation_reads_what_the_change_touches_not_the_history_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bulk_after: int
) -> None:
    """The same churn after 2 and after 12 earlier ones: no more queries, objects decoded (the Events
    are found by the lookup, not decoded all) or rows of whole histories read (with ``BULK_AFTER`` 1,
    every Pod and claim asked about past the first would otherwise load its kind's)."""
    import orjson as orjson_module
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import collector.history_reader
    from derived.writer import derive_snapshot

    monkeypatch.setattr(collector.history_reader, "BULK_AFTER", bulk_after)
    loads = orjson_module.loads
    whole: list[int] = []
    history_of = StoredHistory._history_of
    all_versions = StoredHistory.all_versions

    def counted_history_of(self: StoredHistory, *kinds: str) -> Any:
        out = history_of(self, *kinds)
        whole.append(sum(len(v) for by_uid in out.values() for v in by_uid.values()))
        return out

    def counted_all_versions(self: StoredHistory, kind: str, since: Any = None) -> Any:
        out = all_versions(self, kind, since)
        whole.append(sum(len(v) for v in out.values()))
        return out

    monkeypatch.setattr(StoredHistory, "_history_of", counted_history_of)
    monkeypatch.setattr(StoredHistory, "all_versions", counted_all_versions)
    read = []
    for steps in (2, 12):
        snapshot = _churned_history(tmp_path, f"churned-{steps}", steps)
        decoded: list[str] = []

        def counting(content: Any, decoded: list[str] = decoded) -> Any:
            obj = loads(content)
            decoded.append(obj.get("kind", "") if isinstance(obj, dict) else "")
            return obj

        whole.clear()
        monkeypatch.setattr(orjson_module, "loads", counting)
        with CaptureQueriesContext(connection) as queries:
            result = derive_snapshot(snapshot)
        monkeypatch.setattr(orjson_module, "loads", loads)
        assert result is not None and not result.full and result.pods_derived == 2
        read.append((len(queries), sorted(decoded), sum(whole)))
    (short_queries, short_decoded, short_whole), (long_queries, long_decoded, long_whole) = read
    # At most as much (the first derivation of a process may fill a cache the second finds full).
    assert Counter(long_decoded)["Event"] == Counter(short_decoded)["Event"] > 0
    assert not Counter(long_decoded) - Counter(short_decoded), (Counter(long_decoded), Counter(short_decoded))
    assert long_queries <= short_queries
    assert long_whole <= short_whole
    for steps in (2, 12):
        assert assert_layer_matches_derivation(f"churned-{steps}") > 0
