"""Fuzzing both ways data comes in: import-snapshot files and API server list bodies.

Whatever arrives, an import either stores a snapshot or refuses with a CommandError
and stores nothing; a collection records a failed or partial run with a message,
never a traceback, and never records anything as deleted because of bad input.
Each example runs in a savepoint that is rolled back, so every one starts from
the same seeded history.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from django.core.management import CommandError, call_command
from django.db import transaction
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from claimline.pipeline import collect_and_derive
from collector.kinds import KINDS, LIST_KINDS
from collector.models import ObjectVersion, Snapshot
from collector.sources import ClusterSource
from demo import builders as b
from demo.fake_apiserver import FakeApiServer, Fault
from tests.clusters import T0, small_cluster

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI stays deterministic
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
PODS = "/api/v1/pods"

# --- strategies ---------------------------------------------------------------------------------------

# Strings that identity fields and the database must cope with.
NASTY_STRINGS = ["", "\x00", "a\x00b", "x" * 300, "\u202e", "ünïcødé", "null", "-1", "../../etc", "a" * 70]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(NASTY_STRINGS)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=16,
)
identity = st.sampled_from(["gpu-0", "team-a", "uid-1"]) | st.sampled_from(NASTY_STRINGS) | json_values
metadata = (
    st.fixed_dictionaries({}, optional={"name": identity, "uid": identity, "namespace": identity, "labels": json_values})
    | json_values
)
kinds = st.sampled_from([*KINDS, "List", *LIST_KINDS, "Secret", "PodList"]) | json_values
api_objects = st.fixed_dictionaries(
    {"kind": kinds, "metadata": metadata},
    optional={"apiVersion": st.sampled_from(["v1", "resource.k8s.io/v1", "resource.k8s.io/v1beta1"]) | json_values,
              "spec": json_values, "status": json_values},
)
lists = st.fixed_dictionaries(
    {"kind": st.sampled_from(["List", *LIST_KINDS]) | json_values},
    optional={"apiVersion": st.just("v1"), "metadata": json_values,
              "items": st.lists(api_objects | json_values, max_size=4) | json_values},
)
documents = api_objects | lists | st.lists(api_objects, max_size=3) | json_values


def usable_uid(value: str) -> bool:
    return 0 < len(value) <= 64 and "\x00" not in value


def deep(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(depth):
        node = {"a": [node]}
    return node


@st.composite
def mutated(draw: st.DrawFn, valid: dict[str, Any], in_items: bool = False) -> Any:
    """``valid`` with one to three keys dropped or values replaced by another type, a nasty string or depth.

    ``in_items``: only inside its items, where a collection turns partial rather than failed.
    """
    doc = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, 3))):
        parent: Any = None
        key: Any = None
        node: Any = doc["items"] if in_items else doc
        for _ in range(draw(st.integers(1, 8))):
            if isinstance(node, dict) and node:
                key = draw(st.sampled_from(sorted(node)))
            elif isinstance(node, list) and node:
                key = draw(st.integers(0, len(node) - 1))
            else:
                break
            parent, node = node, node[key]
        if parent is None:
            continue
        op = draw(st.sampled_from(["drop", "retype", "nasty", "deep", "huge"]))
        if op == "drop" and isinstance(parent, dict):
            del parent[key]  # list elements stay: a missing item is a real deletion, not bad input
        elif op == "retype":
            parent[key] = draw(json_values.filter(lambda v, old=node: type(v) is not type(old)))
        elif op == "nasty":
            # Never another usable UID: that is a different object, and the old one rightly deleted.
            choices = [v for v in NASTY_STRINGS if v != node and (key != "uid" or not usable_uid(v))]
            parent[key] = draw(st.sampled_from(choices))
        elif op == "deep":
            parent[key] = deep(draw(st.sampled_from([10, 130])))
        elif op == "huge":
            parent[key] = "x" * 300_000
    return doc


def encode(doc: Any, form: str) -> bytes:
    if form == "yaml":
        return yaml.safe_dump(doc).encode()
    # The standard library writes what orjson refuses: NaN, Infinity, integers beyond 64 bits.
    return json.dumps(doc).encode()


@st.composite
def truncated(draw: st.DrawFn, data: bytes) -> bytes:
    return data[: draw(st.integers(0, max(len(data) - 1, 0)))]


VALID_LIST = b.as_list(small_cluster())
malformed_dumps = st.one_of(
    st.binary(max_size=300),
    st.builds(encode, documents, st.sampled_from(["json", "yaml"])),
    st.builds(encode, mutated(VALID_LIST), st.sampled_from(["json", "yaml"])),
    *[st.builds(encode, mutated(VALID_LIST, in_items=True), st.sampled_from(["json", "yaml"]))] * 2,
    truncated(b.dump_json(small_cluster())),
)


# --- import-snapshot ----------------------------------------------------------------------------------


def stored() -> tuple[int, int, set[tuple[str, str, str, bool]]]:
    heads = ObjectVersion.objects.filter(valid_to__isnull=True).values_list("kind", "uid", "content_hash", "deleted")
    return ObjectVersion.objects.count(), Snapshot.objects.count(), set(heads)


@contextmanager
def rolled_back() -> Iterator[None]:
    """A savepoint undone afterwards: every example starts from the same history."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


@pytest.fixture
def imported(tmp_path: Path) -> tuple[int, int, set[tuple[str, str, str, bool]]]:
    good = tmp_path / "good.json"
    good.write_bytes(b.dump_json(small_cluster()))
    call_command("import-snapshot", str(good), "--at", T0.isoformat(), stdout=StringIO())
    return stored()


@FUZZ
@given(data=malformed_dumps)
@example(data=b"kind: Pod\nmetadata: {name: a, uid: b, namespace: c, creationTimestamp: 2001-13-01}\n")
@example(data=b'[{"kind": 5}, {"kind": null}]')
@example(data=b'{"kind": "PodList", "items": [{"metadata": {"name": "a\\u0000", "uid": "u", "namespace": "n"}}]}')
@example(data=b"kind: Node\nmetadata: {name: n, uid: u}\nspec: {1: a}\n")
@example(data=b"kind: Node\nmetadata: {name: n, uid: u}\nspec: {a: !!binary aGVsbG8=}\n")
@example(data=b"kind: Node\nmetadata: {name: n, uid: u}\nspec: {a: 123456789012345678901234567890}\n")
@example(data=b'kind: Node\nmetadata: {name: n, uid: "\\ud800"}\n')
def test_import_stores_a_snapshot_or_refuses_and_stores_nothing(
    tmp_path: Path, imported: tuple[int, int, set[tuple[str, str, str, bool]]], data: bytes
) -> None:
    dump = tmp_path / "fuzz.json"
    dump.write_bytes(data)
    with rolled_back():
        try:
            call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(hours=1)).isoformat(), stdout=StringIO())
        except CommandError as exc:
            event("refused")
            assert str(exc).startswith("nothing imported: ")
            assert stored() == imported
        else:
            event("imported")
            latest = Snapshot.objects.order_by("-at").first()
            assert latest is not None and latest.status == "ok" and latest.at > T0


# --- list bodies from the API server ------------------------------------------------------------------


def served_list(kind: str) -> dict[str, Any]:
    """What the fake API server answers for a list of ``kind``: typed list, items without kind."""
    items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in small_cluster() if o["kind"] == kind]
    api_version = "v1" if kind == "Pod" else "resource.k8s.io/v1"
    return {"kind": f"{kind}List", "apiVersion": api_version, "metadata": {"resourceVersion": "7"}, "items": items}


def bodies(kind: str) -> st.SearchStrategy[bytes]:
    valid = served_list(kind)
    return st.one_of(
        st.binary(max_size=300),
        st.builds(encode, documents, st.just("json")),
        st.builds(encode, mutated(valid), st.just("json")),
        *[st.builds(encode, mutated(valid, in_items=True), st.just("json"))] * 2,
        truncated(orjson.dumps(valid)),
    )


# A list path and a malformed body for it; both paths are no prefix of another list's path.
served = st.sampled_from([(SLICES, "ResourceSlice"), (PODS, "Pod")]).flatmap(
    lambda case: st.tuples(st.just(case[0]), bodies(case[1]))
)


@pytest.fixture
def collected(source: ClusterSource, make_reader: Any) -> tuple[int, int, set[tuple[str, str, str, bool]]]:
    first = collect_and_derive(source, T0, lambda: T0, reader=make_reader(page_size=50))
    assert first.status == "ok", first.error
    return stored()


@FUZZ
@given(case=served)
@example(case=(SLICES, b"{}"))
@example(case=(SLICES, b'{"kind": "ResourceSliceList", "items": null}'))
@example(case=(SLICES, b'{"kind": "ResourceSliceList", "metadata": {"continue": 7}, "items": []}'))
@example(case=(PODS, orjson.dumps(served_list("Pod")).replace(b'"uid":"', b'"uid":"\\u0000', 1)))
def test_collection_fails_or_is_partial_and_deletes_nothing(
    source: ClusterSource,
    make_reader: Any,
    fake_api: FakeApiServer,
    collected: tuple[int, int, set[tuple[str, str, str, bool]]],
    case: tuple[str, bytes],
) -> None:
    path, body = case
    fake_api.inject(Fault(body=body, path=path, times=-1))
    try:
        with rolled_back():
            snapshot = collect_and_derive(
                source, T0 + timedelta(hours=1), lambda: T0 + timedelta(hours=1),
                reader=make_reader(page_size=50, timeout=2.0, max_retries=0),
            )
            event(snapshot.status)
            assert snapshot.deletions == 0, snapshot.error
            if snapshot.status == "failed":
                assert snapshot.error and snapshot.versions_written == 0
                assert stored()[::2] == collected[::2]  # the same versions and heads
            elif snapshot.status == "partial":
                assert snapshot.error
            else:
                assert snapshot.status == "ok", snapshot.status
    finally:
        fake_api.clear_faults()
