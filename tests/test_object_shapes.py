"""Wrongly typed fields: refused at the door by the API's own field types, and skipped by every reader
when stored before that check (issue 19, item 9)."""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from claimline.pipeline import after_import
from collector import history_writer
from collector.api_types import TYPES_FILE, encoded, from_client
from collector.collect import collect
from collector.models import ObjectVersion, Snapshot
from collector.normalize import NormalizedObject, normalize
from collector.shapes import shape_problem
from collector.sources import ClusterSource
from demo import builders as b
from demo.fake_apiserver import FakeApiServer
from demo.story import DEMO_BASE, demo_snapshots
from tests.clusters import T0, small_cluster

Obj = dict[str, Any]


def _claim(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["kind"] == "ResourceClaim")


def _pod(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "train-0")


def _slice(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["kind"] == "ResourceSlice")


def _class(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["kind"] == "DeviceClass")


def exactly_a_string(objects: list[Obj]) -> Obj:
    _claim(objects)["spec"]["devices"]["requests"][0]["exactly"] = "gpu"
    return _claim(objects)


def state_a_string(objects: list[Obj]) -> Obj:
    _pod(objects)["status"]["containerStatuses"][0]["state"] = "running"
    return _pod(objects)


def attributes_a_list(objects: list[Obj]) -> Obj:
    _slice(objects)["spec"]["devices"][0]["attributes"] = ["productName"]
    return _slice(objects)


def cel_a_string(objects: list[Obj]) -> Obj:
    _class(objects)["spec"]["selectors"][0]["cel"] = "device.driver == 'gpu.nvidia.com'"
    return _class(objects)


# Each malformation, and the problem an import names for it.
MALFORMED: dict[str, tuple[Callable[[list[Obj]], Obj], str]] = {
    "exactly": (exactly_a_string, "spec.devices.requests[0].exactly is str, expected an object"),
    "state": (state_a_string, "status.containerStatuses[0].state is str, expected an object"),
    "attributes": (attributes_a_list, "spec.devices[0].attributes is list, expected an object"),
    "cel": (cel_a_string, "spec.selectors[0].cel is str, expected an object"),
}


def malformed(case: str) -> tuple[list[Obj], Obj]:
    objects = copy.deepcopy(small_cluster())
    return objects, MALFORMED[case][0](objects)


# --- the field types ---------------------------------------------------------------------------------


def test_the_field_types_are_the_installed_clients() -> None:
    """api_types.json says what the official client's models say; else: python -m collector.api_types."""
    assert TYPES_FILE.read_text() == encoded(from_client()), "regenerate: .venv/bin/python -m collector.api_types"


def test_every_object_the_demo_and_builders_make_fits() -> None:
    for _at, objects in demo_snapshots(DEMO_BASE):
        for obj in objects:
            assert shape_problem(obj["kind"], obj) is None, obj["metadata"]["name"]


@pytest.mark.parametrize(
    ("kind", "change", "problem"),
    [
        ("Pod", lambda o: o["spec"]["containers"][0].update(ports=[{"containerPort": "80"}]),
         "spec.containers[0].ports[0].containerPort is str, expected an integer"),
        ("Pod", lambda o: o["spec"].update(containers=[None]), "spec.containers[0] is null, expected an object"),
        ("Node", lambda o: o["metadata"].update(labels={"a": 1}), "metadata.labels.a is int, expected a string"),
        ("ResourceClaim", lambda o: o["status"]["allocation"]["devices"]["results"][0].update(adminAccess="yes"),
         "status.allocation.devices.results[0].adminAccess is str, expected a boolean"),
        ("Event", lambda o: o.update(count=True), "count is bool, expected an integer"),
        ("ResourceSlice", lambda o: o.update(spec=[]), "spec is list, expected an object"),
    ],
)
def test_a_misfit_anywhere_is_named(kind: str, change: Callable[[Obj], None], problem: str) -> None:
    obj = copy.deepcopy(next(o for o in small_cluster() if o["kind"] == kind))
    change(obj)
    assert shape_problem(kind, obj) == problem


def test_fields_the_api_does_not_define_and_nulls_pass() -> None:
    claim = copy.deepcopy(_claim(small_cluster()))
    claim["spec"]["devices"]["fromANewerRelease"] = {"anything": [1]}
    claim["status"]["devices"] = None
    claim["metadata"]["creationTimestamp"] = None
    assert shape_problem("ResourceClaim", claim) is None


# --- at the door ---------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_an_import_with_a_malformed_object_is_refused_naming_it(tmp_path: Path, case: str) -> None:
    good = tmp_path / "good.json"
    good.write_bytes(b.dump_json(small_cluster()))
    call_command("import-snapshot", str(good), "--at", T0.isoformat(), stdout=StringIO())
    before = (Snapshot.objects.count(), ObjectVersion.objects.count())
    objects, bad = malformed(case)
    dump = tmp_path / "bad.json"
    dump.write_bytes(b.dump_json(objects))
    with pytest.raises(CommandError) as refused:
        call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(hours=1)).isoformat())
    message = str(refused.value)
    assert message.startswith(f"nothing imported: {dump}: {bad['kind']} item ")
    assert bad["metadata"]["name"] in message and MALFORMED[case][1] in message
    assert (Snapshot.objects.count(), ObjectVersion.objects.count()) == before


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_collection_reports_a_malformed_object_and_stores_the_rest(
    source: ClusterSource, make_reader: Any, fake_api: FakeApiServer, case: str
) -> None:
    objects, bad = malformed(case)
    fake_api.cluster.replace_stage(0, objects)
    snapshot = collect(source, T0, lambda: T0, reader=make_reader(page_size=50))
    assert snapshot.status == "partial"
    assert MALFORMED[case][1] in snapshot.error and bad["metadata"]["name"] in snapshot.error
    assert not ObjectVersion.objects.filter(uid=bad["metadata"]["uid"]).exists()
    assert snapshot.deletions == 0 and snapshot.objects_seen == len(small_cluster()) - 2  # and not "web"


# --- stored before the check -------------------------------------------------------------------------


def unchecked(obj: Obj) -> NormalizedObject:
    """The object as the writer stored it before fields were checked."""
    meta = obj["metadata"]
    content = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    digest = hashlib.blake2b(content, digest_size=16).hexdigest()
    return NormalizedObject(obj["kind"], meta["uid"], meta.get("namespace", ""), meta["name"], content, digest)


def store_unchecked(objects: list[Obj], hours: int) -> Snapshot:
    """A snapshot written straight through the history writer, past the door's check, then derived."""
    cluster = history_writer.get_cluster("demo")
    at = T0 + timedelta(hours=hours)
    snapshot = history_writer.start_snapshot(cluster, at, "written before fields were checked", started=at)
    kept = [o for o in objects if not (o["kind"] == "Pod" and o["metadata"]["name"] == "web")]
    history_writer.write_snapshot(snapshot, [unchecked(o) for o in kept], {o["kind"] for o in kept}, finished=at)
    after_import(snapshot, lambda: at)
    return snapshot


def import_dump(tmp_path: Path, objects: list[Obj], hours: int, cluster: str = "demo") -> None:
    dump = tmp_path / f"dump-{cluster}-{hours}.json"
    dump.write_bytes(b.dump_json(objects))
    at = (T0 + timedelta(hours=hours)).isoformat()
    call_command("import-snapshot", str(dump), "--at", at, "--cluster", cluster, stdout=StringIO())


def pages(objects: list[Obj]) -> list[str]:
    claim, spec = _claim(objects), _slice(objects)["spec"]
    device = f"{spec['driver']}/{spec['pool']['name']}/{spec['devices'][0]['name']}"
    return [
        "/c/demo/", "/c/demo/claims", f"/c/demo/claims/{claim['metadata']['uid']}/", "/c/demo/pods/team-a/train-0/",
        "/c/demo/inventory/", f"/c/demo/devices/{device}/", "/c/demo/classes/", "/c/demo/audit/",
        "/c/demo/retained/", "/c/demo/review/", "/c/demo/review.csv", "/c/demo/notices/", "/c/demo/snapshots/",
        "/c/demo/playground/", "/metrics", "/api/explain?pod=team-a/train-0", "/api/leaks", "/api/audit",
        "/api/claims", "/api/snapshots", "/api/match-devices?expression=device.driver%20%3D%3D%20%27gpu.nvidia.com%27",
    ]


def answers(client: Client, objects: list[Obj]) -> dict[str, int]:
    return {url: client.get(url).status_code for url in pages(objects)}


def api_documents(client: Client, cluster: str = "demo") -> dict[str, Any]:
    docs = {}
    for path in ("/api/explain?pod=team-a/train-0", "/api/claims", "/api/leaks", "/api/audit"):
        body = client.get(f"{path}{'&' if '?' in path else '?'}cluster={cluster}").content
        docs[path] = orjson.loads(body.replace(f"/c/{cluster}/".encode(), b"/c/CLUSTER/"))
    return docs


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_pages_answer_over_a_stored_malformed_version_and_show_the_corrected_one(
    admin_client: Client, tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = small_cluster()
    import_dump(tmp_path, good, 0)
    objects, bad = malformed(case)
    # A history that never held the bad version, beside it.
    import_dump(tmp_path, good, 0, cluster="clean")
    import_dump(tmp_path, good, 1, cluster="clean")
    with caplog.at_level(logging.WARNING):
        store_unchecked(objects, 1)
        assert answers(admin_client, good) == dict.fromkeys(pages(good), 200)
        # The bad version is read as if never stored: the pages say what they say without it.
        assert api_documents(admin_client) == api_documents(admin_client, "clean")
        import_dump(tmp_path, good, 2)  # the corrected object
        import_dump(tmp_path, good, 2, cluster="clean")
        assert answers(admin_client, good) == dict.fromkeys(pages(good), 200)
        assert api_documents(admin_client) == api_documents(admin_client, "clean")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "a derivation or rendering failed"
    skipped = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert skipped and MALFORMED[case][1] in skipped[0] and bad["metadata"]["uid"] in skipped[0]
    # The corrected object is the current version.
    fixed = next(o for o in good if o["metadata"]["uid"] == bad["metadata"]["uid"])
    current = ObjectVersion.objects.get(cluster__name="demo", uid=bad["metadata"]["uid"], valid_to__isnull=True)
    assert current.content == normalize(fixed["kind"], fixed).content.decode()


@pytest.mark.django_db
def test_the_claim_page_shows_an_unreadable_version_as_stored(admin_client: Client, tmp_path: Path) -> None:
    import_dump(tmp_path, small_cluster(), 0)
    objects, bad = malformed("exactly")
    store_unchecked(objects, 1)
    body = admin_client.get(f"/c/demo/claims/{bad['metadata']['uid']}/").content.decode()
    note = body[body.index('data-testid="unreadable-version"') :]
    assert "cannot be read and is skipped by every report" in note
    assert MALFORMED["exactly"][1] in note.split("</p>")[0]


@pytest.mark.django_db
def test_only_versions_the_door_did_not_check_are_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from collector import history_reader
    from collector.history_reader import StoredHistory
    from collector.shapes import door_mark

    good = small_cluster()
    import_dump(tmp_path, good, 0)  # through the door: every version marked
    objects, bad = malformed("exactly")
    # Past it, as before the check: the bad claim alone, with no mark (nothing else changed).
    cluster = history_writer.get_cluster("demo")
    at = T0 + timedelta(hours=1)
    snapshot = history_writer.start_snapshot(cluster, at, "written before fields were checked", started=at)
    history_writer.write_snapshot(snapshot, [unchecked(bad)], (), finished=at)
    after_import(snapshot, lambda: at)
    versions = ObjectVersion.objects.filter(cluster__name="demo", deleted=False)
    assert set(versions.exclude(shapes_checked=door_mark()).values_list("uid", flat=True)) == {bad["metadata"]["uid"]}
    checked: list[tuple[str, str]] = []

    def counted(kind: str, obj: Obj) -> str | None:
        checked.append((kind, obj["metadata"]["uid"]))
        return shape_problem(kind, obj)

    monkeypatch.setattr(history_reader, "shape_problem", counted)
    monkeypatch.setattr(history_reader, "_WARNED", set())  # warned again, whatever ran before in this process

    def every_object() -> dict[str, dict[str, Obj]]:
        return {kind: dict(objs) for kind, objs in StoredHistory(cluster, at).state.objects.items()}

    with caplog.at_level(logging.WARNING):
        state = every_object()
    # Only the unmarked version was checked, and still refused: the claim reads as its version before.
    assert checked == [("ResourceClaim", bad["metadata"]["uid"])]
    assert state["ResourceClaim"][bad["metadata"]["uid"]] == orjson.loads(
        normalize("ResourceClaim", _claim(good)).content
    )
    assert any("cannot be read" in r.getMessage() for r in caplog.records)
    # Versions checked against other field types (an upgrade's) are checked again, each one read.
    checked.clear()
    versions.update(shapes_checked=door_mark() ^ 1)
    assert every_object() == state
    assert len(checked) == versions.filter(valid_to__isnull=True).count() + 1  # the bad one's stand-in too


@pytest.mark.django_db
def test_collections_and_watched_changes_store_the_mark(source: ClusterSource, make_reader: Any) -> None:
    from collector.shapes import door_mark

    collect(source, T0, lambda: T0, reader=make_reader(page_size=50))
    claim = copy.deepcopy(_claim(small_cluster()))
    claim["metadata"]["labels"] = {"changed": "yes"}
    at = T0 + timedelta(minutes=1)
    snapshot = history_writer.start_snapshot(history_writer.get_cluster(source.name), at, "watch", started=at)
    change = history_writer.Change("ResourceClaim", claim["metadata"]["uid"], at, normalize("ResourceClaim", claim))
    assert history_writer.write_changes(snapshot, [change], finished=at).versions_written == 1
    stored = ObjectVersion.objects.filter(deleted=False)
    assert stored.filter(snapshot=snapshot).count() == 1 and stored.count() > 1
    assert set(stored.values_list("shapes_checked", flat=True)) == {door_mark()}
