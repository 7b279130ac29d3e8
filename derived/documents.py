"""Pod explanation documents as the layer stores them: zlib, against a preset dictionary trained on
the cluster's own documents (``DocumentDictionary``).

Why not leave it to PostgreSQL: a document is ~7 KB of JSON, and every document of a cluster repeats
the same keys, evidence sources, driver, pool and image names. Compressed alone (pglz, as TOAST does)
each keeps ~1.4 KB of that vocabulary; zlib against a dictionary of the cluster's documents keeps
only what differs, ~0.4 KB (bench/layer_storage.py; the Pod documents were most of the layer, and
the layer is bounded by the history it derives from). Every row still holds a whole document, as
history does: nothing is diffed on read, and decoding one costs ~10 µs.

A dictionary is trained once, from the first documents a cluster writes, and never changes: rows
name theirs. A cluster whose first documents were few (a new cluster, the demo) trains a larger one
later, up to zlib's window. Rows written before documents were compressed this way hold plain zlib
(``dictionary`` NULL).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from derived.models import DocumentDictionary

# zlib reaches back 32 KB: a longer preset dictionary is never referenced.
WINDOW = 32 * 1024
# Below this, a batch with a dictionary twice as large trains a new one: a cluster whose first
# documents were a few Pods is not held to them, and a cluster trains O(log WINDOW) dictionaries.
SETTLED = WINDOW // 2
LEVEL = 6  # level 9 is 0.2% smaller for the same documents, and slower


def train(documents: Sequence[tuple[Mapping[str, Any], bytes]]) -> bytes:
    """A preset dictionary from ``(document, its JSON)`` pairs: the longest document of each shape
    (verdict, phase, number of claims), the most common shape last, where zlib reaches it with the
    shortest distances; its last ``WINDOW`` bytes."""
    longest: dict[tuple[str, str, int], bytes] = {}
    counts: Counter[tuple[str, str, int]] = Counter()
    for doc, content in documents:
        verdict = doc.get("verdict") or {}
        shape = (str(verdict.get("reason")), str((doc.get("pod") or {}).get("phase")), len(doc.get("claims") or ()))
        counts[shape] += 1
        best = longest.get(shape)
        if best is None or (len(content), content) > (len(best), best):
            longest[shape] = content
    order = sorted(longest, key=lambda shape: (counts[shape], shape))
    return b"".join(longest[shape] for shape in order)[-WINDOW:]


class Packer:
    """Compresses one write's documents against the cluster's dictionary, training one first when the
    cluster has none (or only a small one and these documents make one twice its size)."""

    def __init__(self, cluster_id: int, at: datetime, documents: Sequence[tuple[Mapping[str, Any], bytes]]) -> None:
        current = DocumentDictionary.objects.filter(cluster_id=cluster_id).order_by("-pk").first()
        self.dictionary = current
        if documents and (current is None or len(current.content) < SETTLED):
            trained = train(documents)
            if current is None or len(trained) >= 2 * len(current.content):
                self.dictionary = DocumentDictionary.objects.create(cluster_id=cluster_id, content=trained, trained=at)
        self._zdict = bytes(self.dictionary.content) if self.dictionary is not None else b""
        if self.dictionary is not None:  # a worker renders what it derived: it need not read this again
            _remember(self.dictionary.pk, self._zdict)

    @property
    def dictionary_id(self) -> int | None:
        return self.dictionary.pk if self.dictionary is not None else None

    def pack(self, content: bytes) -> bytes:
        if not self._zdict:
            return zlib.compress(content, LEVEL)
        packer = zlib.compressobj(LEVEL, zdict=self._zdict)
        return packer.compress(content) + packer.flush()


def unpack(content: bytes | memoryview, dictionary_id: int | None) -> Any:
    """The document a row holds, decoded."""
    blob = bytes(content)
    if dictionary_id is None:
        return orjson.loads(zlib.decompress(blob))
    unpacker = zlib.decompressobj(zdict=_dictionary(dictionary_id, _dictid(blob)))
    return orjson.loads(unpacker.decompress(blob) + unpacker.flush())


# Dictionaries never change, so each process reads each once. Keyed by the checksum zlib records of
# the dictionary too: a test database can hand a rolled-back row's pk to another dictionary.
_DICTIONARIES: dict[tuple[int, int], bytes] = {}


def _dictionary(pk: int, dictid: int) -> bytes:
    found = _DICTIONARIES.get((pk, dictid))
    if found is None:
        found = bytes(DocumentDictionary.objects.values_list("content", flat=True).get(pk=pk))
        if zlib.adler32(found) != dictid:
            raise ValueError(f"document dictionary {pk} is not the one its rows were compressed with")
        _remember(pk, found)
    return found


def _remember(pk: int, dictionary: bytes) -> None:
    if len(_DICTIONARIES) > 64:  # a few per cluster: this only bounds a long-lived test process
        _DICTIONARIES.clear()
    _DICTIONARIES[(pk, zlib.adler32(dictionary))] = dictionary


def _dictid(blob: bytes) -> int:
    """The dictionary's Adler-32 from a zlib stream's header (RFC 1950: FDICT set, 4 bytes after CMF, FLG)."""
    if len(blob) < 6 or not blob[1] & 0x20:
        raise ValueError("a stored document compressed without its dictionary")
    return int.from_bytes(blob[2:6], "big")
