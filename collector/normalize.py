"""Turning an API object into the canonical bytes and hash that history stores.

The hash ignores fields that change without the object changing
(resourceVersion, managedFields, node heartbeats), so an unchanged cluster
writes nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from collector.kinds import BY_KIND
from collector.shapes import shape_problem


class InvalidObject(ValueError):
    """An object that cannot be keyed or stored; the message names what is wrong."""


@dataclass(frozen=True, slots=True)
class NormalizedObject:
    kind: str
    uid: str
    namespace: str
    name: str
    content: bytes
    content_hash: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.uid)


_METADATA_NOISE = ("resourceVersion", "managedFields", "selfLink")


def _strip_noise(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``obj`` without noise, with its kind and apiVersion; ``obj`` is left alone."""
    metadata = obj["metadata"]
    if "resourceVersion" in metadata or "managedFields" in metadata or "selfLink" in metadata:
        metadata = {k: v for k, v in metadata.items() if k not in _METADATA_NOISE}
    body = {**obj, "metadata": metadata}
    if kind == "Node":
        status = obj.get("status")
        if isinstance(status, dict) and isinstance(status.get("conditions"), list):
            # Kubelet rewrites lastHeartbeatTime every few seconds; transitions are what matter.
            conditions = [
                {k: v for k, v in c.items() if k != "lastHeartbeatTime"} if isinstance(c, dict) else c
                for c in status["conditions"]
            ]
            body["status"] = {**status, "conditions": conditions}
    # List items usually lack their own kind and apiVersion.
    if body.get("kind") != kind or "apiVersion" not in body:
        # An older version a reader or dump gave it (a v1alpha3 PodGroup) is kept: the shapes are the same.
        served = body.get("apiVersion")
        body["kind"] = kind
        body["apiVersion"] = served if served in BY_KIND[kind].api_versions else BY_KIND[kind].api_version
    return body


def _printable(text: str) -> str:
    # Messages end up in Snapshot.error: PostgreSQL text cannot hold NUL, and control characters mislead.
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def describe(kind: str, obj: Any, position: int | None = None) -> str:
    """A short name for an object in error messages."""
    where = f"{kind} item {position}" if position is not None else kind
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        meta = obj["metadata"]
        name = meta.get("name")
        if isinstance(name, str):
            ns = meta.get("namespace")
            name = _printable(name[:253])
            return f"{where} ({_printable(ns[:253])}/{name})" if isinstance(ns, str) and ns else f"{where} ({name})"
    return where


def normalize(kind: str, obj: Any, position: int | None = None) -> NormalizedObject:
    """Validate the identity fields of ``obj`` and canonicalize it.

    ``kind`` is the kind the list said it holds; list items usually lack their own.
    """
    if kind not in BY_KIND:
        raise InvalidObject(f"{kind} is not a kind Claimline stores")
    if not isinstance(obj, dict):
        raise InvalidObject(f"{describe(kind, obj, position)}: expected an object, got {type(obj).__name__}")
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise InvalidObject(f"{describe(kind, obj, position)}: metadata is missing or not an object")
    uid, name, namespace = metadata.get("uid"), metadata.get("name"), metadata.get("namespace", "")
    if not isinstance(name, str) or not name:
        raise InvalidObject(f"{describe(kind, obj, position)}: metadata.name is missing")
    if not isinstance(uid, str) or not uid:
        raise InvalidObject(f"{describe(kind, obj, position)}: metadata.uid is missing")
    if len(uid) > 64 or len(name) > 253:
        raise InvalidObject(f"{describe(kind, obj, position)}: metadata.uid or name is too long")
    if namespace is None:
        namespace = ""
    if not isinstance(namespace, str) or len(namespace) > 253:
        raise InvalidObject(f"{describe(kind, obj, position)}: metadata.namespace is not a string")
    if BY_KIND[kind].namespaced and not namespace:
        raise InvalidObject(f"{describe(kind, obj, position)}: metadata.namespace is missing")
    if "\x00" in uid or "\x00" in name or "\x00" in namespace:
        # PostgreSQL text cannot hold NUL: storing it would fail the whole snapshot's transaction.
        raise InvalidObject(f"{describe(kind, obj, position)}: metadata.uid, name or namespace contains NUL")
    for field in ("spec", "status"):
        if field in obj and obj[field] is not None and not isinstance(obj[field], dict):
            raise InvalidObject(f"{describe(kind, obj, position)}: {field} is not an object")
    misfit = shape_problem(kind, obj)
    if misfit:
        raise InvalidObject(f"{describe(kind, obj, position)}: {misfit}")
    body = _strip_noise(kind, obj)
    try:
        content = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InvalidObject(f"{describe(kind, obj, position)}: cannot be stored as JSON: {exc}") from None
    digest = hashlib.blake2b(content, digest_size=16).hexdigest()
    return NormalizedObject(kind, uid, namespace, name, content, digest)
