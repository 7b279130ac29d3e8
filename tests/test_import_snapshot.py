"""import-snapshot: change-only history from dumps, and refusal of bad dumps."""

from __future__ import annotations

import copy
import gc
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import CommandError, call_command

from collector.dumps import DumpError, parse_dump_files
from collector.models import ObjectVersion, Snapshot
from demo import builders as b
from tests.clusters import T0, small_cluster

pytestmark = pytest.mark.django_db


def write(path: Path, objects: list[dict[str, Any]]) -> Path:
    path.write_bytes(b.dump_json(objects))
    return path


def at(hours: int) -> str:
    return (T0 + timedelta(hours=hours)).isoformat()


def latest() -> Snapshot:
    return Snapshot.objects.order_by("-at").first()  # type: ignore[return-value]


def test_same_dump_twice_writes_nothing_the_second_time(tmp_path: Path) -> None:
    dump = write(tmp_path / "a.json", small_cluster())
    call_command("import-snapshot", str(dump), "--at", at(0))
    first = latest()
    assert first.status == "ok"
    assert first.versions_written == first.objects_seen == len(small_cluster()) - 1  # not the Pod without claims
    call_command("import-snapshot", str(dump), "--at", at(1))
    second = latest()
    assert (second.objects_seen, second.versions_written, second.deletions) == (first.objects_seen, 0, 0)
    assert ObjectVersion.objects.count() == first.versions_written


def test_one_changed_object_writes_one_version(tmp_path: Path) -> None:
    objects = small_cluster()
    call_command("import-snapshot", str(write(tmp_path / "a.json", objects)), "--at", at(0))
    changed = copy.deepcopy(objects)
    claim = next(o for o in changed if o["kind"] == "ResourceClaim")
    claim["status"]["reservedFor"] = []
    call_command("import-snapshot", str(write(tmp_path / "b.json", changed)), "--at", at(1))
    assert (latest().versions_written, latest().deletions) == (1, 0)
    versions = ObjectVersion.objects.filter(uid=claim["metadata"]["uid"]).order_by("valid_from")
    assert [v.valid_to is None for v in versions] == [False, True]
    assert orjson.loads(versions[1].content)["status"]["reservedFor"] == []


def test_removed_object_writes_one_deletion(tmp_path: Path) -> None:
    objects = small_cluster()
    call_command("import-snapshot", str(write(tmp_path / "a.json", objects)), "--at", at(0))
    gone = next(o for o in objects if o["kind"] == "Node")
    call_command(
        "import-snapshot", str(write(tmp_path / "b.json", [o for o in objects if o is not gone])), "--at", at(1)
    )
    assert (latest().versions_written, latest().deletions) == (0, 1)
    marker = ObjectVersion.objects.get(uid=gone["metadata"]["uid"], deleted=True)
    assert (marker.namespace, marker.name, marker.content) == ("", gone["metadata"]["name"], "")


def test_a_dump_stores_what_a_collection_would(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Pods DRA never sees are left out, and so are the Events about them; a deleted Pod takes its Events."""
    objects = small_cluster()
    web = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "web")
    objects.append(b.event(web, "Started", "Started container web", T0, type="Normal"))
    call_command("import-snapshot", str(write(tmp_path / "a.json", objects)), "--at", at(0))
    assert "(ignored: 1 Event not using DRA, 1 Pod not using DRA)" in capsys.readouterr().out
    assert not ObjectVersion.objects.filter(name="web").exists()
    assert ObjectVersion.objects.filter(kind="Event").count() == 3
    gone = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "train-0")
    call_command(
        "import-snapshot", str(write(tmp_path / "b.json", [o for o in objects if o is not gone])), "--at", at(1)
    )
    assert (latest().versions_written, latest().deletions) == (0, 2)  # the Pod and its Started event


def test_a_dump_without_claims_keeps_every_pod(tmp_path: Path) -> None:
    """Which Pods a claim reserves cannot be told without the claims: a partial dump keeps them all."""
    pods = [o for o in small_cluster() if o["kind"] == "Pod"]
    call_command("import-snapshot", str(write(tmp_path / "a.json", pods)), "--at", at(0))
    assert latest().objects_seen == len(pods) == 4


def test_resource_version_and_managed_fields_are_noise(tmp_path: Path) -> None:
    objects = small_cluster()
    call_command("import-snapshot", str(write(tmp_path / "a.json", objects)), "--at", at(0))
    noisy = copy.deepcopy(objects)
    for obj in noisy:
        obj["metadata"]["resourceVersion"] = "999999"
        obj["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update"}]
        if obj["kind"] == "Node":
            for cond in obj["status"]["conditions"]:
                cond["lastHeartbeatTime"] = at(1)
    call_command("import-snapshot", str(write(tmp_path / "b.json", noisy)), "--at", at(1))
    assert (latest().versions_written, latest().deletions) == (0, 0)


def test_kinds_absent_from_a_dump_are_not_deleted(tmp_path: Path) -> None:
    objects = small_cluster()
    call_command("import-snapshot", str(write(tmp_path / "a.json", objects)), "--at", at(0))
    only_claims = [o for o in objects if o["kind"] == "ResourceClaim"]
    call_command("import-snapshot", str(write(tmp_path / "b.json", only_claims)), "--at", at(1))
    assert latest().deletions == 0


def test_empty_typed_list_deletes_that_kind(tmp_path: Path) -> None:
    objects = small_cluster()
    call_command("import-snapshot", str(write(tmp_path / "a.json", objects)), "--at", at(0))
    (tmp_path / "b.json").write_bytes(orjson.dumps({"kind": "ResourceClaimList", "apiVersion": "resource.k8s.io/v1", "items": []}))
    call_command("import-snapshot", str(tmp_path / "b.json"), "--at", at(1))
    assert latest().deletions == sum(o["kind"] == "ResourceClaim" for o in objects)


def test_multi_document_yaml(tmp_path: Path) -> None:
    import yaml

    objects = small_cluster()
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all(objects))
    call_command("import-snapshot", str(tmp_path / "a.yaml"), "--at", at(0))
    assert latest().objects_seen == len(objects) - 1  # not the Pod without claims


def test_snapshot_must_be_later_than_the_latest(tmp_path: Path) -> None:
    dump = write(tmp_path / "a.json", small_cluster())
    call_command("import-snapshot", str(dump), "--at", at(5))
    with pytest.raises(CommandError, match="must be later"):
        call_command("import-snapshot", str(dump), "--at", at(4))


BAD_DUMPS = {
    "truncated.json": (b'{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Pod", "metad', "not valid JSON"),
    "scalar.json": (b"42", "expected a Kubernetes object"),
    "items-not-list.json": (b'{"kind": "List", "items": {"a": 1}}', "items is not a list"),
    "item-string.json": (b'{"kind": "List", "items": ["Pod"]}', "not a Kubernetes object"),
    "no-metadata.json": (b'{"kind": "List", "items": [{"kind": "Pod", "apiVersion": "v1"}]}', "metadata is missing"),
    "no-uid.json": (
        b'{"kind": "List", "items": [{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n"}}]}',
        "metadata.uid is missing",
    ),
    "spec-list.json": (
        b'{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n", "uid": "u"}, "spec": []}',
        "spec is not an object",
    ),
    "wrong-version.json": (
        b'{"kind": "ResourceClaim", "apiVersion": "resource.k8s.io/v1beta1", "metadata": {"name": "c", "uid": "u", "namespace": "n"}}',
        "Claimline reads ResourceClaim resource.k8s.io/v1",
    ),
    "bomb.yaml": (
        b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n",
        "aliases are not accepted",
    ),
    "bad.yaml": (b"kind: List\nitems: [\n", "not valid YAML"),
    # Items are streamed (ijson), not parsed whole: the deep one is refused as the item it is.
    "deep.json": (b"[" * 5000 + b"]" * 5000, "item 0 is a list, not a Kubernetes object"),
    "deep-field.json": (
        b'{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n", "uid": "u"}, "spec": {"x": '
        + b"[" * 5000 + b"]" * 5000 + b"}}",
        "cannot be stored as JSON",
    ),
    "empty.json": (b"   \n", "empty file"),
    "blank.json": (b" \t\x0b\x0c\r\n", "empty file"),
}


@pytest.mark.parametrize("name", sorted(BAD_DUMPS))
def test_bad_dump_is_refused_and_nothing_is_written(tmp_path: Path, name: str) -> None:
    good = write(tmp_path / "good.json", small_cluster())
    call_command("import-snapshot", str(good), "--at", at(0))
    before = (Snapshot.objects.count(), ObjectVersion.objects.count())
    content, message = BAD_DUMPS[name]
    (tmp_path / name).write_bytes(content)
    with pytest.raises(CommandError, match=message):
        call_command("import-snapshot", str(good), str(tmp_path / name), "--at", at(1))
    assert (Snapshot.objects.count(), ObjectVersion.objects.count()) == before


def test_json_after_leading_blanks_is_read_as_json(tmp_path: Path) -> None:
    # The format is told by the first non-blank byte, found without copying the dump.
    dump = tmp_path / "a.json"
    dump.write_bytes(b"\r\n\t " + b.dump_json(small_cluster()))
    call_command("import-snapshot", str(dump), "--at", at(0))
    assert latest().versions_written == len(small_cluster()) - 1


@pytest.mark.parametrize("enabled", [True, False])
def test_parsing_leaves_the_gc_as_it_found_it(tmp_path: Path, enabled: bool) -> None:
    good, bad = write(tmp_path / "good.json", small_cluster()), tmp_path / "bad.json"
    bad.write_bytes(b'{"kind": "List", "items": ["Pod"]}')
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        assert parse_dump_files([good]).objects
        assert gc.isenabled() is enabled
        with pytest.raises(DumpError, match="not a Kubernetes object"):
            parse_dump_files([good, bad])
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_dump_of_other_kinds_only_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d.json").write_bytes(
        b'{"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": "d", "uid": "u"}}'
    )
    with pytest.raises(CommandError, match="ignored kinds: Deployment"):
        call_command("import-snapshot", str(tmp_path / "d.json"), "--at", at(0))
    assert Snapshot.objects.count() == 0


def test_bad_at_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="--at"):
        call_command("import-snapshot", str(write(tmp_path / "a.json", small_cluster())), "--at", "yesterday")


def test_snapshots_json_lists_runs_newest_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = write(tmp_path / "a.json", small_cluster())
    call_command("import-snapshot", str(dump), "--at", at(0))
    call_command("import-snapshot", str(dump), "--at", at(1))
    capsys.readouterr()
    call_command("snapshots", "--json")
    doc = orjson.loads(capsys.readouterr().out)
    assert [s["at"] for s in doc["snapshots"]] == [at(1).replace("+00:00", "Z"), at(0).replace("+00:00", "Z")]
    assert set(doc["snapshots"][0]) >= {"id", "at", "source", "status", "objects_seen", "versions_written", "deletions"}
    assert doc["snapshots"][0]["versions_written"] == 0


# --- a List's version (issue 19, item 10) ------------------------------------------------------------


def claims_list(api_version: str, *, items_first: bool = False, count: int = 3) -> bytes:
    """A ResourceClaimList as the API server serves it: items without kind or apiVersion. ``items_first``:
    keys in kubectl's order (alphabetical), the List's kind after its items."""
    claims = [o for o in small_cluster() if o["kind"] == "ResourceClaim"][:count]
    items = [{k: v for k, v in c.items() if k not in ("kind", "apiVersion")} for c in claims]
    if items_first:
        return orjson.dumps({"apiVersion": api_version, "items": items, "kind": "ResourceClaimList", "metadata": {}})
    return orjson.dumps({"kind": "ResourceClaimList", "apiVersion": api_version, "metadata": {}, "items": items})


@pytest.mark.parametrize("items_first", [False, True], ids=["api-order", "kubectl-order"])
@pytest.mark.parametrize("count", [1, 0], ids=["items", "empty"])
def test_items_without_apiversion_take_their_lists_and_another_version_is_refused(
    tmp_path: Path, admin_client: Any, items_first: bool, count: int
) -> None:
    call_command("import-snapshot", str(write(tmp_path / "a.json", small_cluster())), "--at", at(0))
    before = (Snapshot.objects.count(), ObjectVersion.objects.count())
    claims = {c["uid"] for c in admin_client.get("/api/claims").json()["claims"]}
    dump = tmp_path / "v1beta1.json"
    dump.write_bytes(claims_list("resource.k8s.io/v1beta1", items_first=items_first, count=count))
    expected = "v1beta1.json: ResourceClaimList resource.k8s.io/v1beta1; Claimline reads ResourceClaim resource.k8s.io/v1"
    with pytest.raises(CommandError, match=re.escape(expected)):
        call_command("import-snapshot", str(dump), "--at", at(1))
    # Neither imported as v1 nor taken as "every other claim is gone".
    assert (Snapshot.objects.count(), ObjectVersion.objects.count()) == before
    assert {c["uid"] for c in admin_client.get("/api/claims").json()["claims"]} == claims == {
        o["metadata"]["uid"] for o in small_cluster() if o["kind"] == "ResourceClaim"
    }


@pytest.mark.parametrize("items_first", [False, True], ids=["api-order", "kubectl-order"])
def test_items_of_a_v1_list_without_apiversion_are_imported(tmp_path: Path, items_first: bool) -> None:
    dump = tmp_path / "v1.json"
    dump.write_bytes(claims_list("resource.k8s.io/v1", items_first=items_first))
    call_command("import-snapshot", str(dump), "--at", at(0))
    stored = [orjson.loads(v.content) for v in ObjectVersion.objects.filter(kind="ResourceClaim")]
    assert len(stored) == 3 and {s["apiVersion"] for s in stored} == {"resource.k8s.io/v1"}


def test_a_yaml_list_lends_its_version_too(tmp_path: Path) -> None:
    import yaml

    (tmp_path / "c.yaml").write_text(yaml.safe_dump(orjson.loads(claims_list("resource.k8s.io/v1beta1"))))
    with pytest.raises(CommandError, match="c.yaml: ResourceClaimList resource.k8s.io/v1beta1; Claimline reads"):
        call_command("import-snapshot", str(tmp_path / "c.yaml"), "--at", at(0))
    assert Snapshot.objects.count() == 0


def test_a_generic_list_lends_its_version_as_kubectl_reads_it(tmp_path: Path) -> None:
    """kubectl gives an item without apiVersion its List's, even a ``List`` of v1: a claim there is not v1 of DRA."""
    claim = {k: v for k, v in next(o for o in small_cluster() if o["kind"] == "ResourceClaim").items() if k != "apiVersion"}
    (tmp_path / "l.json").write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": [claim]}))
    with pytest.raises(CommandError, match="item 0 is ResourceClaim v1; Claimline reads ResourceClaim resource.k8s.io/v1"):
        call_command("import-snapshot", str(tmp_path / "l.json"), "--at", at(0))
    node = {k: v for k, v in next(o for o in small_cluster() if o["kind"] == "Node").items() if k != "apiVersion"}
    (tmp_path / "n.json").write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": [node]}))
    call_command("import-snapshot", str(tmp_path / "n.json"), "--at", at(0))
    assert latest().versions_written == 1
