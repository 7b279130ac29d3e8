"""The overview rendered after a derivation (``derived.overviews``) against the overview computed on read:
the same document at every snapshot of the demo story, for a platform admin and for team members."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client

from access.models import NamespaceGrant
from collector.history_reader import StoredHistory, namespaces_in_use
from collector.models import Cluster, Snapshot
from demo import builders as b
from demo.story import DEMO_BASE, demo_snapshots
from derived.models import OverviewDocument, OverviewNamespace
from derived.overviews import stored_overview
from derived.reading import overview_read
from derived.thresholds import leak_thresholds
from domain.cluster.timefmt import rfc3339
from domain.reports.redaction import Redactor, Scope
from tests.story_counts import TEAM

pytestmark = pytest.mark.django_db


def _computed(history: StoredHistory, scope: Scope) -> dict[str, Any]:
    known = () if scope.admin else namespaces_in_use(history.cluster, history.as_of)
    return overview_read(history, Redactor(scope, known), leak_thresholds())


def _json(doc: dict[str, Any] | None) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def _scopes(history: StoredHistory) -> list[Scope]:
    """An admin, the demo's team, each namespace alone, and two namespaces together."""
    known = sorted(namespaces_in_use(history.cluster, history.as_of))
    return [
        Scope(admin=True),
        Scope(admin=False, namespaces=frozenset({TEAM})),
        Scope(admin=False, namespaces=frozenset(known[:2])),
        *(Scope(admin=False, namespaces=frozenset({ns})) for ns in known),
    ]


def test_the_rendered_overview_is_the_computed_one_at_every_snapshot(tmp_path: Path) -> None:
    flagged_seen = waiting_seen = 0
    for i, (at, objects) in enumerate(demo_snapshots(DEMO_BASE)):
        dump = tmp_path / f"stage-{i}.json"
        dump.write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", at.isoformat())  # derives, then renders
        cluster = Cluster.objects.get(name="demo")
        snapshot = Snapshot.objects.get(cluster=cluster, at=at)
        assert OverviewDocument.objects.get(cluster=cluster).snapshot == snapshot
        history = StoredHistory(cluster, at)
        for scope in _scopes(history):
            stored = stored_overview(history, scope, leak_thresholds())
            assert stored is not None, f"no rendering stands for snapshot {i}"
            assert _json(stored) == _json(_computed(history, scope)), (i, scope)
            flagged_seen += stored["flagged"]["claims"]
            waiting_seen += stored["pods"]["total"]
    # The comparison covered documents with flagged claims and waiting Pods, admin and member alike.
    assert flagged_seen and waiting_seen
    assert OverviewNamespace.objects.exists()


def test_an_earlier_snapshot_or_other_thresholds_are_computed_on_read(demo_history: Any, settings: Any) -> None:
    cluster = Cluster.objects.get(name="demo")
    first, *_rest, last = Snapshot.objects.filter(cluster=cluster).order_by("at")
    admin = Scope(admin=True)
    assert stored_overview(StoredHistory(cluster, first.at), admin, leak_thresholds()) is None
    latest = StoredHistory(cluster, last.at)
    assert stored_overview(latest, admin, leak_thresholds()) is not None
    settings.CLAIMLINE_ORPHANED_AFTER = 1  # another threshold: the rendering does not stand
    assert stored_overview(latest, admin, leak_thresholds()) is None


def test_time_travel_shows_the_overview_as_of_the_asked_snapshot(demo_history: Any, admin_client: Client) -> None:
    cluster = Cluster.objects.get(name="demo")
    first = Snapshot.objects.filter(cluster=cluster).order_by("at").first()
    assert first is not None
    as_of = first.at.isoformat().replace("+00:00", "Z")
    page = admin_client.get(f"/c/demo/?as_of={as_of}", secure=True)
    assert page.status_code == 200
    computed = _computed(StoredHistory(cluster, first.at), Scope(admin=True))
    assert _json(page.context["doc"]) == _json(computed)
    latest = admin_client.get("/c/demo/", secure=True)
    assert latest.context["doc"]["as_of"] != computed["as_of"]


def test_a_team_member_sees_no_other_teams_names(demo_history: Any) -> None:
    """The rendered document holds every team's flagged claims and warnings; a member's view of it
    names none of the other namespaces' claims or Pods."""
    group = Group.objects.create(name="ml")
    NamespaceGrant.objects.create(group=group, namespace=TEAM)
    member = User.objects.create_user("member")
    member.groups.add(group)
    client = Client()
    client.force_login(member)
    cluster = Cluster.objects.get(name="demo")
    history = StoredHistory(cluster)
    admin = stored_overview(history, Scope(admin=True), leak_thresholds())
    assert admin is not None
    others = {
        f"{ns}/{pod['name']}"
        for group_ in admin["pods"]["by_reason"]
        for pod in group_["pods"]
        if (ns := pod["namespace"]) != TEAM
    }
    others |= {f"{c['namespace']}/{c['name']}" for c in admin["flagged"]["top"] if c["namespace"] != TEAM}
    others |= {c["name"] for c in admin["flagged"]["top"] if c["namespace"] != TEAM}
    assert others, "the story has no other team's waiting Pod or flagged claim to hide"
    response = client.get("/c/demo/", secure=True)
    doc = _json(response.context["doc"]).decode()
    body = response.content.decode()
    for name in sorted(others):
        assert name not in doc and name not in body, name
    # The page shows the member's document as the rendering gives it.
    rendered = stored_overview(history, Scope(admin=False, namespaces=frozenset({TEAM})), leak_thresholds())
    assert rendered is not None and rendered == response.context["doc"]


def test_a_quiet_checkpoint_is_served_the_rendering_before_it(
    tmp_path: Path, settings: Any, admin_client: Client
) -> None:
    """A snapshot that changed nothing renders no overview while the stored one is younger than
    CLAIMLINE_OVERVIEW_REFRESH: readers of it get that rendering, about the checkpoint, saying when its
    figures were computed; once older, the next checkpoint renders again."""
    settings.CLAIMLINE_OVERVIEW_REFRESH = 300
    stages = list(demo_snapshots(DEMO_BASE))
    for i, (at, objects) in enumerate(stages):
        dump = tmp_path / f"stage-{i}.json"
        dump.write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", at.isoformat())
    rendered_at = stages[-1][0]
    quiet = rendered_at + timedelta(minutes=1)
    call_command("import-snapshot", str(dump), "--at", quiet.isoformat())
    cluster = Cluster.objects.get(name="demo")
    assert not Snapshot.objects.get(cluster=cluster, at=quiet).changed
    assert OverviewDocument.objects.select_related("snapshot").get(cluster=cluster).snapshot.at == rendered_at
    history = StoredHistory(cluster, quiet)
    for scope in _scopes(history):
        served = stored_overview(history, scope, leak_thresholds())
        assert served is not None, scope
        expected = _computed(StoredHistory(cluster, rendered_at), scope)
        expected.update(as_of=rfc3339(quiet), figures_as_of=expected["as_of"])
        assert _json(served) == _json(expected), scope
    page = admin_client.get("/c/demo/", secure=True)
    assert page.context["doc"]["as_of"] == rfc3339(quiet)
    assert "Nothing changed since" in page.content.decode()
    # The stored rendering stands for no snapshot before the one it was rendered for.
    assert stored_overview(StoredHistory(cluster, stages[-2][0]), Scope(admin=True), leak_thresholds()) is None
    settings.CLAIMLINE_OVERVIEW_REFRESH = 90  # the rendering is now too old for the next checkpoint
    later = quiet + timedelta(minutes=1)
    call_command("import-snapshot", str(dump), "--at", later.isoformat())
    assert OverviewDocument.objects.select_related("snapshot").get(cluster=cluster).snapshot.at == later
    served = stored_overview(StoredHistory(cluster, later), Scope(admin=True), leak_thresholds())
    assert served is not None and "figures_as_of" not in served
