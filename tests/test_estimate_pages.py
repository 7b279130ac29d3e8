"""What would make a waiting Pod run, and when, where users read it: ``explain --json``, the Pod page and
the pending-Pod notice, over history imported snapshot by snapshot (the derived layer stores it)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client

from access.models import NamespaceGrant
from demo import builders as b
from domain.cluster.state import MemoryHistory
from domain.reports.notices import pending_pod_subjects
from tests import test_estimates as story
from tests.snapshot_cli import cli_json, import_objects
from tests.test_access import login

pytestmark = pytest.mark.django_db

M = timedelta(minutes=1)


def import_story(tmp_path: Path, snapshots: list[tuple[Any, list[dict[str, Any]]]]) -> None:
    for i, (at, objects) in enumerate(snapshots):
        dump = tmp_path / f"stage-{i}.json"
        dump.write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", at.isoformat(), stdout=StringIO())


def test_explain_json_carries_the_estimate_and_its_basis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshots = story.story(4)
    import_story(tmp_path, snapshots)
    verdict = cli_json(capsys, "explain", "ml/train-next")["verdict"]
    assert verdict["reason"] == "devices-in-use"
    assert verdict["estimate"]["at"] == "2026-11-20T12:50:00Z"
    assert verdict["estimate"]["basis"] == (
        "claims of Job ml/train usually held them 3h (median of 4 finished since 2026-10-21, p75 3h)"
    )
    assert [h["likely_free"] for h in verdict["estimate"]["holders"]] == [
        "2026-11-20T12:50:00Z",
        "2026-11-20T14:00:00Z",
    ]
    assert verdict["wait"]["lacking"] == 1 and len(verdict["wait"]["devices"]) == 2
    # The stored document answers as derived on read does.
    on_read = MemoryHistory(snapshots)
    from domain.verdicts.explain import explain

    assert explain(on_read, "ml", "train-next")["verdict"] == verdict
    # A later snapshot that changed nothing: the document is not derived again, the estimate is dated anew.
    import_objects(tmp_path, snapshots[-1][1], at=story.T0 + 30 * M)
    later = cli_json(capsys, "explain", "ml/train-next")["verdict"]
    assert (later["estimate"]["at"], later["estimate"]["in_seconds"]) == ("2026-11-20T12:50:00Z", 20 * 60)
    text = StringIO()
    call_command("explain", "ml/train-next", stdout=text)
    assert "  when: as of 2026-11-20 12:30 UTC the 2 holders have held their devices up to 2h40m;" in text.getvalue()


def test_explain_json_says_why_there_is_no_estimate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import_story(tmp_path, story.story(2))
    verdict = cli_json(capsys, "explain", "ml/train-next")["verdict"]
    assert "estimate" not in verdict
    assert "no estimate: too little history for ml/train-" in verdict["no_estimate"]


def test_explain_json_carries_the_nearest_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = story.base(4, nodes=("a-0", "a-1")) + story.unscheduled_with(
        [b.request(selectors=[f"{story.MEM}.compareTo(quantity('48Gi')) >= 0"])]
    )
    import_objects(tmp_path, objects, at=story.T0)
    verdict = cli_json(capsys, "explain", "ml/train")["verdict"]
    assert verdict["reason"] == "selector-unsatisfiable"
    assert verdict["suggestion"]["would_match"] == 8
    assert verdict["suggestion"]["change"].startswith("8 devices have memory 40Gi; request gpu asks for memory >= 48Gi")


def test_pod_page_shows_the_estimate_and_the_nearest_change(admin_client: Client, tmp_path: Path) -> None:
    import_story(tmp_path, story.story(4))
    body = admin_client.get("/c/demo/pods/ml/train-next/").content.decode()
    shown = body[body.index('data-testid="estimate"') :]
    assert "Likely free about 2026-11-20T12:50:00Z</strong> (in ~50 min on worker-0)" in shown
    assert "claims of Job ml/train usually held them 3h (median of 4 finished since 2026-10-21, p75 3h)" in shown
    assert "<td>2h10m</td>" in shown and "<td>3h</td>" in shown  # a holder's time so far, the median
    unsatisfiable = story.base(4, nodes=("a-2",)) + story.unscheduled_with(
        [b.request(selectors=[f"{story.MEM}.compareTo(quantity('48Gi')) >= 0"])]
    )
    import_objects(tmp_path, unsatisfiable, at=story.T0 + M)
    page = admin_client.get("/c/demo/pods/ml/train/").content.decode()
    suggestion = page[page.index('data-testid="suggestion"') :]
    assert "Nearest change that would fit:</strong> 4 devices have memory 40Gi" in suggestion
    assert "with memory &gt;= 40Gi, a-2 fits (4 matching devices)" in suggestion


def test_pending_pod_notice_tells_the_estimate() -> None:
    history = MemoryHistory(story.story(4))
    subject = next(s for s in pending_pod_subjects(history, 60) if s.name == "ml/train-next")
    assert subject.reason == "devices-in-use"
    assert "; when: as of 2026-11-20 12:00 UTC the 2 holders" in subject.message
    assert subject.message.endswith("the first is likely free in ~50 min (about 2026-11-20 12:50 UTC) on worker-0")


def test_pending_pod_notice_tells_the_nearest_change() -> None:
    objects = story.base(4, nodes=("a-0",)) + story.unscheduled_with([b.request(count=6)])
    subject = next(s for s in pending_pod_subjects(MemoryHistory([(story.T0, objects)]), 60) if s.name == "ml/train")
    assert subject.message.endswith("; nearest change: with count 4 instead of 6, a-0 fits")


def test_demo_pod_pages_show_the_estimate_or_why_there_is_none_and_hide_other_teams_holders(demo_history: Any) -> None:
    NamespaceGrant.objects.create(group=Group.objects.create(name="ml-training"), namespace="ml-training")
    admin = login("owner", ["platform-admins"]).get("/c/demo/pods/ml-training/pretrain-8xh100-q7n4k/").content.decode()
    member = login("member", ["ml-training"]).get("/c/demo/pods/ml-training/pretrain-8xh100-q7n4k/").content.decode()
    said = admin[admin.index('data-testid="estimate"') :]
    assert "no estimate: too little history for inference/llama-serve-0-gpu-" in said
    assert "claims of StatefulSet inference/llama-serve: 0" in said
    told = member[member.index('data-testid="estimate"') :]
    assert "no estimate: too little history for (a claim in another namespace)" in told
    assert "llama-serve" not in told[: told.index("</p>")]
    # h100-bench's holder, the notebook's claim, is dated by research's finished holds (the sweep's earlier trials).
    bench = login("admin3", ["platform-admins"]).get("/c/demo/pods/ml-training/h100-bench-7r2mx/").content.decode()
    estimate = bench[bench.index('data-testid="estimate"') :]
    assert "usually held them 6h50m (median of 3 finished since 2026-10-21, p75 7h10m)" in estimate
    assert "the first is likely free in ~1h50m (about 2026-11-20 13:50 UTC) on worker-h100-mig-0" in estimate
    admin_page = login("admin2", ["platform-admins"]).get("/c/demo/pods/research/llm-finetune/").content.decode()
    assert (
        "Nearest change that would fit:</strong> 9 devices have memory 80Gi; request gpu asks for memory &gt; 80Gi"
        in (admin_page)
    )


def test_deriving_a_waiting_pod_reads_finished_holds_from_spans_not_every_claims_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate of a devices-in-use Pod reads the finished holds from the derived allocation spans
    (one query, their kin stored with them), not the lookback window's claim and Pod versions."""
    from collector.history_reader import StoredHistory
    from derived.models import AllocationSpan
    from domain.verdicts import estimates

    snapshots = story.story(4)
    import_story(tmp_path, snapshots[:-1])
    finished = AllocationSpan.objects.filter(end__isnull=False, namespace="ml")
    assert set(finished.values_list("workload", "template")) == {("Job/train", "one-gpu")}
    read: list[tuple[str, Any]] = []
    real = StoredHistory.all_versions

    def all_versions(self: StoredHistory, kind: str, since: Any = None) -> Any:
        read.append((kind, since))
        return real(self, kind, since)

    def from_versions(self: Any, since: Any) -> Any:
        raise AssertionError("the derivation read finished holds from the versions")

    monkeypatch.setattr(StoredHistory, "all_versions", all_versions)
    monkeypatch.setattr(estimates.VersionHolds, "_holds", from_versions)
    (tmp_path / "last").mkdir()
    import_story(tmp_path / "last", [snapshots[-1]])
    assert not [r for r in read if r[0] in ("ResourceClaim", "Pod") and r[1] is not None]
    monkeypatch.undo()
    verdict = cli_json(capsys, "explain", "ml/train-next")["verdict"]
    assert verdict["estimate"]["basis"] == (
        "claims of Job ml/train usually held them 3h (median of 4 finished since 2026-10-21, p75 3h)"
    )
    from domain.verdicts.explain import explain

    assert explain(MemoryHistory(snapshots), "ml", "train-next")["verdict"] == verdict


def test_a_team_member_reads_no_other_teams_claim_uid_or_name_in_a_wait(demo_history: Any) -> None:
    """The wait's holders in another team's namespace are dropped and their claim UIDs, which the wait's
    ``devices`` list per device, read as hidden: on the Pod page and in /api/explain."""
    NamespaceGrant.objects.create(group=Group.objects.create(name="ml-training"), namespace="ml-training")
    pod = "ml-training/pretrain-8xh100-q7n4k"
    admin = login("owner", ["platform-admins"]).get("/api/explain", {"pod": pod}).json()["verdict"]
    others = [h for h in admin["wait"]["holders"] if h["namespace"] != "ml-training"]
    assert others and {h["uid"] for h in others} <= {u for keeping in admin["wait"]["devices"] for u in keeping}
    member = login("member", ["ml-training"])
    api = member.get("/api/explain", {"pod": pod})
    page = member.get(f"/c/demo/pods/{pod}/")
    assert api.status_code == page.status_code == 200
    told = api.json()["verdict"]
    assert len(told["wait"]["devices"]) == len(admin["wait"]["devices"])
    own = {h["uid"] for h in admin["wait"]["holders"] if h["namespace"] == "ml-training"}
    told_uids = {u for keeping in told["wait"]["devices"] for u in keeping}
    assert "(another namespace)" in told_uids and told_uids <= own | {"(another namespace)"}
    for text in (api.content.decode(), page.content.decode()):
        for holder in others:
            assert holder["uid"] not in text
            assert holder["claim"] not in text and holder["claim"].split("/")[1] not in text
