"""Why is this Pod stuck? The first boundary that does not hold, in one sentence.

``explain`` returns DESIGN.md's explain JSON. Boundaries are checked in order
(inventory, allocation, preparation, runtime) across all of the Pod's claims; the
first one that failed (or, failing none, is still pending) names the verdict.
A boundary with no evidence either way (unknown) never blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from domain.boundaries.judgement import (
    BOUNDARIES,
    FAILED,
    OK,
    PENDING,
    AllocationTrial,
    ClaimLifecycle,
    is_terminal,
)
from domain.boundaries.lifecycle import pod_lifecycle
from domain.cluster.pod_claims import last_known
from domain.cluster.state import HistoryView, Object, meta, ns_name, uid_of
from domain.cluster.timefmt import parse_time, rfc3339
from domain.inventory.devices import Inventory
from domain.verdicts.estimates import FinishedHolds, estimate_from, wait_basis, window_start_for
from domain.verdicts.suggestions import SUGGESTED_FOR, suggest
from domain.verdicts.timeline import timeline


class PodNotFound(LookupError):
    pass


def _incarnations(history: HistoryView, uids: list[str]) -> list[dict[str, Any]]:
    out = []
    for uid in uids:
        obj, gone_at = last_known(history, "Pod", uid)
        out.append(incarnation_entry(uid, meta(obj).get("creationTimestamp") if obj else None, rfc3339(gone_at)))
    return out


def incarnation_entry(uid: str, created: str | None, deleted: str | None) -> dict[str, Any]:
    """One line of the explain document's ``incarnations``."""
    return {"uid": uid, "created": created, "deleted": deleted}


def choose_verdict(pod: Object, lifecycles: list[ClaimLifecycle]) -> dict[str, Any]:
    """The first boundary, in order, that some claim has not passed; a failure beats a wait on it."""
    waits_count = not is_terminal(pod)
    for boundary in BOUNDARIES:
        states = [(lc, lc.boundaries[boundary]) for lc in lifecycles]
        for _lc, b in states:
            if b.state == FAILED and b.reason:
                return {"boundary": boundary, "reason": b.reason, "message": b.message or b.reason}
        for lc, b in states:
            if b.state == PENDING and waits_count:
                if b.reason:
                    return {"boundary": boundary, "reason": b.reason, "message": b.message or b.reason}
                return _pending_verdict(boundary, lc, b.message)
    return {"boundary": None, "reason": "ok", "message": _ok_message(pod, lifecycles)}


def _pending_verdict(boundary: str, lc: ClaimLifecycle, detail: str | None) -> dict[str, Any]:
    # DESIGN.md names no reason for a wait past allocation; these two say which boundary waits.
    if boundary == "preparation":
        message = detail or f"kubelet has not finished preparing claim {lc.name}"
        return {"boundary": boundary, "reason": "preparation-pending", "message": message}
    if boundary == "runtime":
        message = f"claim {lc.name} is prepared, but no container using it has started yet"
        if detail:
            message += f": {detail}"
        return {"boundary": boundary, "reason": "runtime-pending", "message": message}
    return {
        "boundary": boundary,
        "reason": "waiting-for-scheduler",
        "message": detail or f"claim {lc.name} is waiting for the scheduler",
    }


def _ok_message(pod: Object, lifecycles: list[ClaimLifecycle]) -> str:
    if not lifecycles:
        return "the Pod uses no resource claims"
    devices = [f"{d.pool}/{d.device}" for lc in lifecycles for d in lc.devices]
    nodes = sorted({lc.node for lc in lifecycles if lc.node})
    where = f" on {', '.join(nodes)}" if nodes else ""
    held = f"devices {', '.join(devices)}{where}" if devices else "its claims"
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return f"the Pod ran to completion with {held}"
    if phase == "Failed":
        ran = all(lc.boundaries["runtime"].state == OK for lc in lifecycles)
        return f"the Pod Failed {'after its containers ran' if ran else 'before its containers started'} with {held}"
    runtime_since = min((lc.boundaries["runtime"].since or "" for lc in lifecycles), default="")
    since = f" since {runtime_since}" if runtime_since else ""
    return f"all four boundaries hold: {held} allocated, prepared, and injected into running containers{since}"


def explain(
    history: HistoryView,
    namespace: str,
    name: str,
    pod_uid: str | None = None,
    observed_uuids: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Pod's claims across the four boundaries and the verdict, as of ``history.as_of``.

    The latest incarnation by default; ``pod_uid`` picks an earlier one.
    ``observed_uuids`` (container name → GPU UUID the container saw) adds identity evidence.
    """
    uids = history.uids_named("Pod", namespace, name)
    uid = pick_incarnation(uids, history.as_of, namespace, name, pod_uid)
    judged = explain_incarnation(history, uid, observed_uuids)
    if judged is None:
        raise PodNotFound(f"no stored version of Pod {namespace}/{name} ({uid})")
    return explain_document(history.as_of, _incarnations(history, uids), judged)


def pick_incarnation(uids: list[str], as_of: datetime, namespace: str, name: str, pod_uid: str | None = None) -> str:
    """The incarnation asked about among the Pod's ``uids`` as of ``as_of`` (the latest by default)."""
    if not uids:
        raise PodNotFound(f"no Pod {namespace}/{name} as of {rfc3339(as_of)}")
    if pod_uid is not None and pod_uid not in uids:
        raise PodNotFound(f"Pod {namespace}/{name} never had UID {pod_uid} (it had: {', '.join(uids)})")
    return pod_uid or uids[-1]


def explain_incarnation(
    history: HistoryView,
    uid: str,
    observed_uuids: Mapping[str, str] | None = None,
    inventory_of: Callable[[HistoryView], Inventory] = lambda h: Inventory.of(h.state),
    finished: FinishedHolds | None = None,
) -> dict[str, Any] | None:
    """One incarnation's part of the explain document (pod, claims, verdict, timeline); None if never stored.

    It depends on the incarnation alone, not on its siblings or on when it is asked
    (``explain_document`` adds those), so it can be derived once and stored.
    ``inventory_of`` lets a caller judging many Pods as of one time share one inventory.
    ``finished``: where a waiting Pod's estimate reads finished holds (the derived layer's spans);
    the history's own versions when None.
    """
    pod, gone_at = last_known(history, "Pod", uid)
    if pod is None:
        return None
    # A deleted incarnation is judged against the cluster as it was while the Pod existed.
    judged_history = history.before(gone_at) if gone_at is not None else history
    inventory = inventory_of(judged_history)
    judged = pod_lifecycle(judged_history, pod, gone_at, observed_uuids, inventory)
    entries = timeline(judged_history, pod, judged.claims, judged.events, inventory.nodes)
    verdict = choose_verdict(pod, judged.claims)
    if gone_at is None and not is_terminal(pod):
        verdict.update(outlook(judged_history, pod, judged.claims, verdict["reason"], finished))
    doc = {
        "pod": _pod_summary(pod, gone_at),
        "claims": [_claim_doc(lc, entries) for lc in judged.claims],
        "verdict": _as_last_seen(verdict, gone_at),
        "timeline": entries,
    }
    if judged.group is not None:
        doc["group"] = judged.group.to_dict()
    return doc


def outlook(
    history: HistoryView,
    pod: Object,
    lifecycles: list[ClaimLifecycle],
    reason: str,
    finished: FinishedHolds | None = None,
) -> dict[str, Any]:
    """What would make a Pod waiting on allocation run, and when, as verdict fields.

    ``devices-in-use``: ``wait``, the holders and their kin's history (``verdicts.estimates``), which
    ``explain_document`` dates as of the time asked (``estimate`` or ``no_estimate``), so the stored
    document stays right while the claims do not change. ``selector-unsatisfiable`` and
    ``insufficient-devices``: ``suggestion`` (the nearest change that fits) and ``suggestions``
    (every relaxation tried that would; ``verdicts.suggestions``).
    """
    trial = next(
        (
            b.basis
            for lc in lifecycles
            if (b := lc.boundaries["allocation"]).reason == reason and isinstance(b.basis, AllocationTrial)
        ),
        None,
    )
    if trial is None:
        return {}
    if reason == "devices-in-use":
        return _wait_basis(history, pod, trial, finished)
    if reason in SUGGESTED_FOR:
        found = suggest(trial.inventory, trial.claims, trial.simulation, trial.nodes, trial.cache, trial.siblings)
        if found:
            first = found[0]
            return {
                "suggestion": {"change": first["change"], "would_match": first["would_match"]},
                "suggestions": found,
            }
    return {}


def _wait_basis(
    history: HistoryView, pod: Object, trial: AllocationTrial, finished: FinishedHolds | None
) -> dict[str, Any]:
    best = trial.simulation.best
    failing = best.failing if best is not None else None
    if failing is None or not (failing.held or failing.short):
        return {}
    blockers = [[claim] for claim in failing.held.values()]
    blockers += [[h.claim for h in shortage.holders] for shortage in failing.short.values()]
    lacking = max(1, failing.needed - failing.progress)
    created = parse_time(meta(pod).get("creationTimestamp")) or history.as_of
    return {"wait": wait_basis(history, blockers, lacking, failing.node, window_start_for(created), finished)}


# Boundary reasons whose judgement changes with time alone, the objects unchanged: a binding wait
# counts toward the scheduler's timeout ("for N s", then binding-failed).
TIME_DEPENDENT_REASONS = frozenset({"binding-pending"})


def verdict_reader(
    history: HistoryView, stored: Mapping[str, Mapping[str, Any]] | None = None, with_outlook: bool = False
) -> Callable[[Object], Mapping[str, Any]]:
    """How a report over many Pods learns each live, unfinished Pod's verdict.

    ``stored``: the verdicts of exactly the Pods that wait, as derived when the snapshot was
    stored, so a Pod absent from them is ``ok`` and nothing is judged here. Without them each
    Pod is judged over the state's one Inventory (its selector cache checks each device once
    per selector set). ``with_outlook``: a verdict judged here gets ``outlook``'s fields too, as a
    stored one has them.
    """
    if stored is not None:
        return lambda pod: stored.get(uid_of(pod), _OK)

    def judge(pod: Object) -> Mapping[str, Any]:
        claims = pod_lifecycle(history, pod, inventory=Inventory.of(history.state)).claims
        verdict = choose_verdict(pod, claims)
        if with_outlook:
            verdict.update(outlook(history, pod, claims, verdict["reason"]))
        return verdict

    return judge


_OK: Mapping[str, Any] = {"boundary": None, "reason": "ok", "message": ""}


def depends_on_time(incarnation: Mapping[str, Any]) -> bool:
    """Whether a live incarnation's document (``explain_incarnation``) would read differently later."""
    return any(
        b.get("reason") in TIME_DEPENDENT_REASONS for c in incarnation["claims"] for b in c["boundaries"].values()
    )


def explain_document(
    as_of: datetime, incarnations: list[dict[str, Any]], incarnation: Mapping[str, Any]
) -> dict[str, Any]:
    """DESIGN.md's explain JSON: one incarnation's part with the time asked and every incarnation."""
    doc = {
        "as_of": rfc3339(as_of),
        "pod": incarnation["pod"],
        "incarnations": incarnations,
        "claims": incarnation["claims"],
        "verdict": dated_verdict(incarnation["verdict"], as_of),
        "timeline": incarnation["timeline"],
    }
    if "group" in incarnation:
        doc["group"] = incarnation["group"]
    return doc


def dated_verdict(verdict: Mapping[str, Any], as_of: datetime) -> dict[str, Any]:
    """The verdict with its ``wait`` dated as of ``as_of``: ``estimate`` or ``no_estimate`` added."""
    out = dict(verdict)
    if out.get("wait"):
        out.update(estimate_from(out["wait"], as_of))
    return out


def outlook_sentences(verdict: Mapping[str, Any]) -> list[str]:
    """The dated verdict's estimate (or why there is none) and nearest changes, each a labelled sentence."""
    out = []
    if verdict.get("estimate"):
        out.append(f"when: {verdict['estimate']['summary']}")
    elif verdict.get("no_estimate"):
        out.append(f"when: {verdict['no_estimate']}")
    for i, s in enumerate(verdict.get("suggestions") or ()):
        out.append(f"{'nearest change' if i == 0 else 'or'}: {s['change']}")
    return out


def _as_last_seen(verdict: dict[str, Any], gone_at: datetime | None) -> dict[str, Any]:
    """A deleted incarnation is judged as it last was; the message says so."""
    if gone_at is not None:
        verdict["message"] = f"the Pod was deleted at {rfc3339(gone_at)}; until then {verdict['message']}"
    return verdict


def _claim_doc(lc: ClaimLifecycle, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A claim's boundaries, with the timeline entries about it or about the whole Pod."""
    doc = lc.to_dict()
    doc["timeline"] = [e for e in entries if e.get("claim") in (None, lc.uid)]
    return doc


def _pod_summary(pod: Object, gone_at: datetime | None) -> dict[str, Any]:
    namespace, name = ns_name(pod)
    return {
        "namespace": namespace,
        "name": name,
        "uid": meta(pod).get("uid"),
        "node": (pod.get("spec") or {}).get("nodeName"),
        "phase": (pod.get("status") or {}).get("phase"),
        "created": meta(pod).get("creationTimestamp"),
        "deleted": rfc3339(gone_at),
    }
