"""Keeping other teams' claim details out of documents a team member sees.

Documents (explain, leaks, audit, the weekly review) are computed over the
whole cluster, so verdicts stay right (devices held by another team are still
held); what a team member is shown is then filtered here: entries about other
namespaces are dropped, and ``namespace/name`` references to them inside
messages and evidence are replaced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from domain.cluster.state import ClusterState, ns_name

HIDDEN = "(a claim in another namespace)"
# A holder in a table of holders (the inventory, counter sets, a device's shares): its amounts stay.
HIDDEN_HOLDER = "(another namespace)"


@dataclass(frozen=True)
class Scope:
    admin: bool
    namespaces: frozenset[str] = field(default_factory=frozenset)

    def sees(self, namespace: str | None) -> bool:
        """Cluster-scoped objects (no namespace) are inventory everyone may see."""
        return self.admin or not namespace or namespace in self.namespaces


# namespace/name, where a namespace is a DNS label.
_REFERENCE = re.compile(r"\b([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)/([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)")


def referenced_namespaces(value: Any) -> set[str]:
    """Every name ``Redactor.document`` would look up in its hidden set for ``value``: the
    namespaces of entries and the first label of each ``namespace/name`` reference.

    A redactor built from the known namespaces among these hides the same as one built from
    every known namespace, so a page about one Pod asks the database about the names its
    document holds, not about every namespace of the cluster.
    """
    found: set[str] = set()
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "/" in item:
                found.update(m.group(1) for m in _REFERENCE.finditer(item))
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            if isinstance(item.get("namespace"), str):
                found.add(item["namespace"])
            pending.extend(item.values())
    return found


class Redactor:
    def __init__(self, scope: Scope, known_namespaces: Iterable[str]):
        self.scope = scope
        self.hidden = frozenset(ns for ns in known_namespaces if ns and not scope.sees(ns))

    def text(self, value: str) -> str:
        if not self.hidden or "/" not in value:
            return value
        return _REFERENCE.sub(lambda m: HIDDEN if m.group(1) in self.hidden else m.group(0), value)

    def document(self, value: Any) -> Any:
        """A copy of ``value`` with hidden references replaced and entries naming a hidden namespace dropped."""
        if self.scope.admin or not self.hidden:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.document(v) for v in value if not self._about_hidden(v)]
        if isinstance(value, dict):
            out = {k: self.document(v) for k, v in value.items()}
            hidden_uids = self._hidden_holder_uids(value)
            if hidden_uids and isinstance(value.get("devices"), list):
                out["devices"] = self._without_uids(value["devices"], hidden_uids)
            return out
        return value

    def _hidden_holder_uids(self, value: dict[str, Any]) -> set[str]:
        """The claim UIDs of a wait's holders (``verdicts.estimates.wait_basis``) in hidden namespaces:
        the holders are dropped, and their UIDs in the wait's ``devices`` would still name them."""
        holders = value.get("holders")
        if not isinstance(holders, list):
            return set()
        return {str(h["uid"]) for h in holders if self._about_hidden(h) and isinstance(h.get("uid"), str)}

    @staticmethod
    def _without_uids(devices: list[Any], uids: set[str]) -> list[Any]:
        """Each device's keeping claims, another team's claim UID read as ``HIDDEN_HOLDER``: how many
        claims keep a device stays."""
        return [
            [HIDDEN_HOLDER if uid in uids else uid for uid in keeping] if isinstance(keeping, list) else keeping
            for keeping in devices
        ]

    def _about_hidden(self, value: Any) -> bool:
        return isinstance(value, dict) and isinstance(value.get("namespace"), str) and value["namespace"] in self.hidden

    def matches(self, doc: dict[str, Any]) -> dict[str, Any]:
        """``match_devices``' answer (the playground, ``/api/match-devices``): a device another team's
        claim holds, or whose counters or capacity it holds, is still unavailable, without the claim's name."""
        if self.scope.admin or not self.hidden:
            return doc
        matched = [
            {**m, "unavailable": self.text(m["unavailable"])} if isinstance(m.get("unavailable"), str) else m
            for m in doc["matched"]
        ]
        return {**doc, "matched": matched}

    def leaks(self, doc: dict[str, Any]) -> dict[str, Any]:
        return {**doc, "claims": [self.document(c) for c in doc["claims"] if self.scope.sees(c.get("namespace"))]}

    def audit(self, doc: dict[str, Any]) -> dict[str, Any]:
        def visible(w: dict[str, Any]) -> bool:
            subject = str(w.get("subject", ""))
            namespace = subject.split("/", 1)[0] if "/" in subject else subject
            # A subject is a node, a namespace or namespace/claim; nodes are inventory.
            return namespace not in self.hidden

        return {**doc, "warnings": [self.document(w) for w in doc["warnings"] if visible(w)]}

    def review(self, doc: dict[str, Any]) -> dict[str, Any]:
        return {
            **doc,
            "by_namespace": [r for r in doc["by_namespace"] if self.scope.sees(r.get("namespace"))],
            "top_offenders": [self.document(o) for o in doc["top_offenders"] if self.scope.sees(o.get("namespace"))],
        }


def visible_holders(scope: Scope, holders: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Holders (``namespace``, ``claim``, ``claim_uid``) as a table lists them: those in namespaces the
    scope does not see keep what they hold, not their names; decided by their namespace, so no list of
    the namespaces in use is needed."""
    return [h if scope.sees(h["namespace"]) else {**h, "claim": HIDDEN_HOLDER, "claim_uid": ""} for h in holders]


def known_namespaces(state: ClusterState) -> frozenset[str]:
    """Namespaces a document may name: live Namespaces, and those of live claims and Pods."""
    known = state.derived.get("namespaces")
    if known is None:  # every Pod and claim of the cluster: once per state, not per page
        names = {ns_name(o)[1] for o in state.of_kind("Namespace")}
        for kind in ("ResourceClaim", "Pod"):
            names.update(ns_name(o)[0] for o in state.of_kind(kind))
        known = state.derived["namespaces"] = frozenset(names)
    return known
