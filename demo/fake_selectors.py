"""Field and label selectors as kube-apiserver parses and applies them, for the fake API server.

Field selectors: ``field=value``, ``field==value``, ``field!=value``, joined by commas, over the fields
each resource supports (an unsupported field is a 400, as on a real server). Label selectors: the
equality forms, ``key in (a,b)``, ``key notin (a,b)``, ``key`` and ``!key``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Fields a real server accepts in fieldSelector, per resource (every resource has metadata.name and,
# namespaced ones, metadata.namespace).
FIELDS: dict[str, tuple[str, ...]] = {
    "pods": (
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
    ),
    "nodes": ("spec.unschedulable",),
    "namespaces": ("status.phase",),
    "events": (
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
        "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
        "reason", "reportingComponent", "source", "type",
    ),
    "resourceslices": ("spec.nodeName", "spec.driver"),
}


class SelectorError(ValueError):
    """A selector the server rejects (400 BadRequest)."""


Matcher = Callable[[dict[str, Any]], bool]


def _field_value(obj: dict[str, Any], path: str) -> str:
    if path == "source" and isinstance(obj.get("source"), dict):
        return str(obj["source"].get("component") or "")
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_matcher(resource: str, namespaced: bool, selector: str) -> Matcher | None:
    """A predicate for ``selector`` (None when it selects everything); SelectorError when invalid."""
    selector = selector.strip()
    if not selector:
        return None
    allowed = {"metadata.name", *FIELDS.get(resource, ())}
    if namespaced:
        allowed.add("metadata.namespace")
    terms: list[tuple[str, bool, str]] = []
    for raw in selector.split(","):
        term = raw.strip()
        if not term:
            continue
        op = next((o for o in ("!=", "==", "=") if o in term), None)
        if op is None:
            raise SelectorError(f"invalid selector: '{selector}'; can't understand '{term}'")
        field, _, value = term.partition(op)
        negate = op == "!="
        field = field.strip()
        if field not in allowed:
            raise SelectorError(f'field label not supported: {field}')
        terms.append((field, negate, value.strip()))
    if not terms:
        return None

    def matches(obj: dict[str, Any]) -> bool:
        return all((_field_value(obj, f) == v) != negate for f, negate, v in terms)

    return matches


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, Any]) -> bool:
        present = self.key in labels
        value = str(labels.get(self.key, ""))
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # "!=" and "notin" also select objects without the label, as on a real server
        return not present or value not in self.values


_KEY = re.compile(r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$")
_SET = re.compile(r"^(\S+)\s+(in|notin)\s*\(([^)]*)\)$")


def _split_terms(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return [t.strip() for t in terms if t.strip()]


def label_matcher(selector: str) -> Matcher | None:
    selector = selector.strip()
    if not selector:
        return None
    requirements: list[_Requirement] = []
    for term in _split_terms(selector):
        m = _SET.match(term)
        if m:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            requirement = _Requirement(m.group(1), m.group(2), values)
        elif term.startswith("!"):
            requirement = _Requirement(term[1:].strip(), "!")
        else:
            for op in ("!=", "==", "="):
                if op in term:
                    key, _, value = term.partition(op)
                    requirement = _Requirement(key.strip(), "!=" if op == "!=" else "=", (value.strip(),))
                    break
            else:
                requirement = _Requirement(term, "exists")
        if not _KEY.match(requirement.key):
            raise SelectorError(f"unable to parse requirement: invalid label key {requirement.key!r}")
        requirements.append(requirement)

    def matches(obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
        labels = labels if isinstance(labels, dict) else {}
        return all(r.matches(labels) for r in requirements)

    return matches


def combined(*matchers: Matcher | None) -> Matcher | None:
    active = [m for m in matchers if m is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]
    return lambda obj: all(m(obj) for m in active)
