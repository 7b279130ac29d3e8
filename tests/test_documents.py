"""Pod documents as stored: compressed against the cluster's dictionary, read back whole."""

from __future__ import annotations

import hashlib
import zlib
from datetime import timedelta
from typing import Any

import orjson
import pytest

from collector.models import Cluster
from derived.documents import WINDOW, Packer, train, unpack
from derived.models import DocumentDictionary, PodExplanation
from tests.clusters import T0

pytestmark = pytest.mark.django_db


def _doc(reason: str, phase: str, claims: int, filler: str = "") -> tuple[dict[str, Any], bytes]:
    doc = {
        "pod": {"phase": phase, "note": filler},
        "claims": [{"uid": f"c{i}"} for i in range(claims)],
        "verdict": {"reason": reason},
    }
    return doc, orjson.dumps(doc)


def test_the_dictionary_holds_one_document_per_shape_the_most_common_last() -> None:
    common = [_doc("ok", "Running", 1, filler=f"{i:04d}") for i in range(5)]
    rare = _doc("devices-in-use", "Pending", 1, filler="a longer pending document")
    dictionary = train([*common, rare])
    assert dictionary == rare[1] + common[-1][1]  # the longest of each shape; ties: the greater content


def test_the_dictionary_is_cut_to_what_zlib_can_reach() -> None:
    shapes = [_doc(f"reason-{i}", "Pending", 1, filler="x" * 5000) for i in range(10)]
    dictionary = train(shapes)
    assert len(dictionary) == WINDOW
    assert dictionary.endswith(shapes[-1][1])


def test_every_stored_document_reads_back_as_the_json_its_hash_names(demo_history: Any) -> None:
    rows = list(PodExplanation.objects.values_list("content", "dictionary_id", "content_hash"))
    assert rows and all(dictionary is not None for _c, dictionary, _h in rows)
    for content, dictionary, digest in rows:
        assert hashlib.blake2b(orjson.dumps(unpack(content, dictionary)), digest_size=16).hexdigest() == digest
    # One dictionary per cluster, trained from its first documents, unless they made a small one.
    assert DocumentDictionary.objects.filter(cluster__name="demo").count() <= 2


def test_documents_are_smaller_than_compressed_alone(demo_history: Any) -> None:
    contents = [
        (bytes(c), orjson.dumps(unpack(c, d))) for c, d in PodExplanation.objects.values_list("content", "dictionary_id")
    ]
    stored = sum(len(c) for c, _json in contents)
    alone = sum(len(zlib.compress(j, 6)) for _c, j in contents)
    assert stored < 0.7 * alone, (stored, alone)


def test_a_small_dictionary_gives_way_to_one_twice_its_size_and_old_rows_still_read() -> None:
    cluster = Cluster.objects.create(name="small-first")
    first = Packer(cluster.pk, T0, [_doc("ok", "Running", 1)])
    old = first.pack(_doc("ok", "Running", 1)[1])
    assert first.dictionary is not None
    same = Packer(cluster.pk, T0 + timedelta(minutes=1), [_doc("ok", "Running", 1, filler="a bit longer")])
    assert same.dictionary_id == first.dictionary_id  # not twice the size: kept
    bigger = Packer(cluster.pk, T0 + timedelta(minutes=2), [_doc(f"r{i}", "Pending", 2) for i in range(4)])
    assert bigger.dictionary_id != first.dictionary_id
    assert unpack(old, first.dictionary_id) == _doc("ok", "Running", 1)[0]
    new = bigger.pack(_doc("r1", "Pending", 2)[1])
    assert unpack(new, bigger.dictionary_id) == _doc("r1", "Pending", 2)[0]


def test_a_settled_dictionary_is_kept() -> None:
    cluster = Cluster.objects.create(name="settled")
    settled = Packer(cluster.pk, T0, [_doc(f"reason-{i}", "Pending", 1, filler="x" * 5000) for i in range(10)])
    later = Packer(cluster.pk, T0 + timedelta(hours=1), [_doc(f"other-{i}", "Running", 3, "y" * 9000) for i in range(9)])
    assert later.dictionary_id == settled.dictionary_id


def test_a_document_read_with_another_dictionary_is_refused() -> None:
    cluster = Cluster.objects.create(name="two-dictionaries")
    one = Packer(cluster.pk, T0, [_doc("ok", "Running", 1)])
    other = DocumentDictionary.objects.create(cluster=cluster, content=b"another dictionary entirely", trained=T0)
    packed = one.pack(_doc("ok", "Running", 1)[1])
    with pytest.raises(ValueError, match=f"dictionary {other.pk} is not the one"):
        unpack(packed, other.pk)


def test_rows_from_before_dictionaries_read_as_plain_zlib() -> None:
    assert unpack(zlib.compress(b'{"verdict": {"reason": "ok"}}'), None) == {"verdict": {"reason": "ok"}}


def test_a_dictionary_in_use_cannot_be_deleted(demo_history: Any) -> None:
    """Its rows could not be read without it."""
    from django.db.models import RestrictedError

    dictionary = DocumentDictionary.objects.filter(cluster__name="demo").first()
    assert dictionary is not None
    with pytest.raises(RestrictedError):
        dictionary.delete()
