"""The opaque ``continue`` token of a paged API list, as the Kubernetes API pages its lists.

A token names the list it continues: the cluster, the snapshot it was read as of (so every page of
one listing answers about the same snapshot, however many are stored meanwhile) and the key of the
last item it returned. It is URL-safe base64 of a small JSON document; clients pass it back as is.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime

import orjson

from domain.cluster.timefmt import parse_time, rfc3339


class BadToken(ValueError):
    """A ``continue`` value this server did not write."""


@dataclass(frozen=True)
class Continuation:
    cluster: str
    as_of: datetime
    after: tuple[str, ...]

    def encode(self) -> str:
        doc = {"cluster": self.cluster, "as_of": rfc3339(self.as_of), "after": list(self.after)}
        return base64.urlsafe_b64encode(orjson.dumps(doc)).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str, key_length: int) -> Continuation:
        try:
            doc = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        except (binascii.Error, ValueError):
            raise BadToken("the continue token is not one this server wrote") from None
        if not isinstance(doc, dict):
            raise BadToken("the continue token is not one this server wrote")
        cluster, as_of, after = doc.get("cluster"), parse_time(doc.get("as_of")), doc.get("after")
        if (
            not isinstance(cluster, str)
            or as_of is None
            or not isinstance(after, list)
            or len(after) != key_length
            or not all(isinstance(part, str) for part in after)
        ):
            raise BadToken("the continue token is not one this server wrote")
        return cls(cluster, as_of, tuple(after))
