"""Claims that keep devices they should not: DESIGN.md's retention (leak) reasons.

Every verdict is computed as of a time from the objects' own timestamps and the
stored versions, never from the wall clock, so re-running it on the same
history gives the same answer.

A claim's leak condition has a start ("observed since"):

- ``stuck-deletion``: the claim's ``deletionTimestamp``.
- ``orphaned-allocation``: when the last consumer in ``reservedFor`` stopped:
  its containers' ``finishedAt`` (terminal Pod), else its ``deletionTimestamp``,
  else the version that recorded its disappearance; a consumer never seen in
  history counts from the first claim version that reserved it.
- ``unreserved-allocation``: the first version of the current run of
  "allocated, reservedFor empty" versions; when that run starts with the first
  version history has of the claim, the allocation time (nothing says it was
  ever reserved).
- ``held-by-failing-pod``: when the consumer last ran successfully: a Pod that
  never started counts from its scheduling, a crash-looping one from the first
  crash of the current episode (walking back through its versions until one
  shows a run of at least ``STABLE_RUN``).

The claim is flagged once ``as_of - observed_since`` exceeds the reason's threshold.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from domain.cluster.claim_summaries import allocation_results, consumers
from domain.cluster.gangs import PODGROUPS, group_key, is_group_consumer, members_of
from domain.cluster.state import ClusterState, HistoryView, Object, Version, meta, ns_name, uid_of
from domain.cluster.timefmt import parse_time, rfc3339
from domain.inventory.devices import Inventory, allocation_time
from domain.inventory.equivalents import claim_fractions

STUCK_DELETION = "stuck-deletion"
ORPHANED = "orphaned-allocation"
UNRESERVED = "unreserved-allocation"
FAILING_POD = "held-by-failing-pod"
# The order a claim's conditions are reported in when several hold at once.
REASONS = (STUCK_DELETION, ORPHANED, UNRESERVED, FAILING_POD)

# kubelet resets a container's crash back-off after it has run this long, so a run
# at least this long counts as the Pod having run successfully.
STABLE_RUN = timedelta(minutes=10)

# Waiting reasons that mean the container cannot run as things stand.
FAILING_WAIT_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerError",
        "CreateContainerConfigError",
        "RunContainerError",
        "PreCreateHookError",
        "PostStartHookError",
    }
)
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
PREPARE_FAILED_EVENT = "FailedPrepareDynamicResources"


@dataclass(frozen=True)
class Thresholds:
    """How long each leak condition must have been observed before a claim is flagged (seconds)."""

    orphaned: float = 15 * 60
    stuck_deletion: float = 15 * 60
    unreserved: float = 60 * 60
    held_by_failing_pod: float = 6 * 60 * 60

    def for_reason(self, reason: str) -> timedelta:
        seconds = {
            ORPHANED: self.orphaned,
            STUCK_DELETION: self.stuck_deletion,
            UNRESERVED: self.unreserved,
            FAILING_POD: self.held_by_failing_pod,
        }[reason]
        return timedelta(seconds=seconds)

    def as_dict(self) -> dict[str, float]:
        return {reason: self.for_reason(reason).total_seconds() for reason in REASONS}


@dataclass(frozen=True)
class Consumer:
    """One ``reservedFor`` entry and what became of it as of the evaluation time."""

    resource: str
    name: str
    uid: str
    state: str  # running | starting | failing | terminal | gone | other
    since: datetime | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "name": self.name,
            "uid": self.uid,
            "state": self.state,
            "since": rfc3339(self.since),
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Condition:
    """A leak condition that holds for a claim at a time, whether or not it is past its threshold yet."""

    reason: str
    since: datetime
    consumers: tuple[Consumer, ...] = field(default=())


# --- small readers ------------------------------------------------------------------------------


def _status(obj: Object) -> dict[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, dict) else {}


def _upto(versions: Sequence[Version], at: datetime) -> list[Version]:
    return [v for v in versions if v.at <= at]


def held_devices(claim: Object) -> list[dict[str, str]]:
    """The devices an allocation holds exclusively.

    Results with ``adminAccess`` are left out: admin access reaches devices that
    stay allocatable to others, so it keeps nothing scarce.
    """
    return [
        {
            "driver": str(r.get("driver") or ""),
            "pool": str(r.get("pool") or ""),
            "device": str(r.get("device") or ""),
        }
        for r in allocation_results(claim)
        if not r.get("adminAccess")
    ]


def allocation_since(claim_versions: Sequence[Version]) -> datetime | None:
    """When the latest allocation was made: ``allocationTimestamp``, else the first version showing it."""
    if not claim_versions or claim_versions[-1].obj is None:
        return None
    current = claim_versions[-1].obj
    stamped = allocation_time(current)
    if stamped is not None:
        return stamped
    results = allocation_results(current)
    if not results:
        return None
    since = claim_versions[-1].at
    for version in reversed(claim_versions[:-1]):
        if version.obj is None or allocation_results(version.obj) != results:
            break
        since = version.at
    return since


def _span_hours(since: datetime, until: datetime) -> float:
    return max((until - since).total_seconds(), 0.0) / 3600.0


def device_hours(device_count: int, since: datetime, until: datetime) -> float:
    return round(device_count * _span_hours(since, until), 2)


def leak_hours(
    device_count: int, equivalents: float, since: datetime, leaking: datetime, at: datetime
) -> dict[str, float]:
    """A flagged claim's hours as of ``at``: held from the allocation (``since``), leaked from when it was
    flagged (``leaking``), in devices and in GPU-equivalents (``equivalents``: its devices' fractions added up)."""
    held, leaked = _span_hours(since, at), _span_hours(leaking, at)
    return {
        "device_hours": device_hours(device_count, since, at),
        "leaked_device_hours": device_hours(device_count, leaking, at),
        "gpu_equivalent_hours": round(equivalents * held, 2),
        "leaked_gpu_equivalent_hours": round(equivalents * leaked, 2),
    }


# What a leak report entry says that moves with the as-of time alone (the message says for how long).
TIMED_FIELDS = ("device_hours", "leaked_device_hours", "gpu_equivalent_hours", "leaked_gpu_equivalent_hours", "message")


def flagged_from(condition: Condition, thresholds: Thresholds) -> datetime:
    """When a claim counts as leaking: its condition observed for the reason's threshold.

    The one definition of leaked device-hours: devices x hours from here on. Held
    device-hours (``device_hours`` of the leaks JSON) count from the allocation instead.
    """
    return condition.since + thresholds.for_reason(condition.reason)


# --- consumers ------------------------------------------------------------------------------------


def _container_statuses(pod: Object, init: bool = True) -> list[dict[str, Any]]:
    status = _status(pod)
    keys = ("initContainerStatuses", "containerStatuses") if init else ("containerStatuses",)
    return [c for key in keys for c in status.get(key) or () if isinstance(c, dict)]


def _state(container: dict[str, Any], key: str) -> dict[str, Any] | None:
    state = container.get(key) or {}
    for kind in ("running", "waiting", "terminated"):
        if isinstance(state, dict) and isinstance(state.get(kind), dict):
            return {"kind": kind, **state[kind]}
    return None


def _condition_time(pod: Object, type_: str, status: str = "True") -> datetime | None:
    for cond in _status(pod).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == type_ and cond.get("status") == status:
            return parse_time(cond.get("lastTransitionTime"))
    return None


def terminal_since(pod: Object) -> datetime | None:
    """When a Succeeded/Failed Pod stopped: its last container's ``finishedAt``."""
    finished = [
        t
        for c in _container_statuses(pod, init=False)
        if (s := _state(c, "state")) and s["kind"] == "terminated"
        for t in [parse_time(s.get("finishedAt"))]
        if t is not None
    ]
    if finished:
        return max(finished)
    return _condition_time(pod, "Ready", "False")


def _started_at(pod: Object) -> datetime | None:
    return (
        _condition_time(pod, "PodScheduled")
        or parse_time(_status(pod).get("startTime"))
        or parse_time(meta(pod).get("creationTimestamp"))
    )


def _run_lengths(pod: Object, seen_until: datetime, newer: Object | None) -> list[tuple[timedelta, bool]]:
    """For each running container: (how long it has run at least, whether it restarted before).

    A newer version's ``lastState`` tells how long the same run really lasted.
    """
    later: dict[tuple[str, str], datetime] = {}
    for c in _container_statuses(newer, init=False) if newer else ():
        last = _state(c, "lastState")
        if last and last["kind"] == "terminated" and (end := parse_time(last.get("finishedAt"))):
            later[(str(c.get("name")), str(last.get("startedAt")))] = end
    runs = []
    for c in _container_statuses(pod, init=False):
        state = _state(c, "state")
        if not state or state["kind"] != "running":
            continue
        started = parse_time(state.get("startedAt"))
        if started is None:
            continue
        end = later.get((str(c.get("name")), str(state.get("startedAt"))), seen_until)
        restarted = int(c.get("restartCount") or 0) > 0 and bool(_state(c, "lastState"))
        runs.append((end - started, restarted))
    return runs


def pod_run_state(pod: Object, seen_until: datetime, newer: Object | None = None) -> tuple[str, str]:
    """``(state, detail)``: terminal | running | failing | starting, for one version of a Pod.

    ``seen_until`` is how long the version is known to have held (the next
    version's time, or the evaluation time).
    """
    if _status(pod).get("phase") in TERMINAL_PHASES:
        return "terminal", str(_status(pod).get("phase")).lower()
    for c in _container_statuses(pod):
        state = _state(c, "state")
        if state and state["kind"] == "waiting" and state.get("reason") in FAILING_WAIT_REASONS:
            return "failing", str(state["reason"])
    for c in _container_statuses(pod, init=False):
        state = _state(c, "state")
        if state and state["kind"] == "terminated" and int(state.get("exitCode") or 0) != 0:
            return "failing", f"container {c.get('name')} exited with {state.get('exitCode')}"
    runs = _run_lengths(pod, seen_until, newer)
    containers = _container_statuses(pod, init=False)
    if runs and len(runs) == len(containers):
        # A container that crashed before and is only seconds into its new run is still crash-looping.
        if any(restarted and length < STABLE_RUN for length, restarted in runs):
            return "failing", "restarting after a crash"
        return "running", ""
    if runs:
        return "running", ""
    waiting = [s.get("reason") for c in _container_statuses(pod) if (s := _state(c, "state")) and s.get("reason")]
    return "starting", str(waiting[0]) if waiting else "not started"


def _last_crashes(pod: Object) -> list[tuple[datetime, timedelta]]:
    """``(finishedAt, run length)`` of each container's previous run, from ``lastState``."""
    out = []
    for c in _container_statuses(pod, init=False):
        last = _state(c, "lastState")
        if not last or last["kind"] != "terminated":
            continue
        started, finished = parse_time(last.get("startedAt")), parse_time(last.get("finishedAt"))
        if finished is not None:
            out.append((finished, finished - started if started else timedelta(0)))
    return out


def _first_failure(pod: Object) -> datetime | None:
    """From one version alone: when the Pod last stopped running successfully.

    A previous run of at least ``STABLE_RUN`` ended the last success; without
    one, nothing shows the Pod ever ran successfully, so it counts from its start.
    """
    stable_ends = [end for end, length in _last_crashes(pod) if length >= STABLE_RUN]
    return max(stable_ends) if stable_ends else _started_at(pod)


def unsuccessful_since(pod_versions: Sequence[Version], at: datetime) -> tuple[datetime, str] | None:
    """When the Pod last stopped running successfully, or None if it is running (or terminal) at ``at``.

    Walks back through the Pod's versions while they show it failing or starting.
    A version where it ran successfully dates the episode to the first crash after
    it; running out of history leaves the oldest failing version's own evidence.
    """
    versions = _upto(pod_versions, at)
    if not versions or versions[-1].obj is None:
        return None
    current = versions[-1].obj
    state, detail = pod_run_state(current, at)
    if state not in ("failing", "starting"):
        return None
    oldest = versions[-1]
    newer: Object = current
    for version in reversed(versions[:-1]):
        if version.obj is None:
            break
        older_state, _ = pod_run_state(version.obj, version.at, newer)
        if older_state not in ("failing", "starting"):
            assert oldest.obj is not None
            crashes = [end for end, _ in _last_crashes(oldest.obj)]
            return min([*crashes, oldest.at]), detail
        oldest = version
        newer = version.obj
    assert oldest.obj is not None
    return _first_failure(oldest.obj) or oldest.at, detail


def _gone_since(pod_versions: Sequence[Version]) -> tuple[datetime | None, str]:
    last = next((v.obj for v in reversed(pod_versions) if v.obj is not None), None)
    if last is not None and _status(last).get("phase") in TERMINAL_PHASES:
        return terminal_since(last), str(_status(last).get("phase")).lower()
    return _object_gone_since(pod_versions)


def _reserved_since(claim_versions: Sequence[Version], uid: str) -> datetime | None:
    """The first version of the current run in which the claim reserved ``uid``."""
    since = None
    for version in reversed(claim_versions):
        if version.obj is None or not any(c.get("uid") == uid for c in consumers(version.obj)):
            break
        since = version.at
    return since


def describe_consumer(
    history: HistoryView, ref: dict[str, Any], claim_versions: Sequence[Version], at: datetime
) -> Consumer:
    resource = str(ref.get("resource") or "")
    name, uid = str(ref.get("name") or ""), str(ref.get("uid") or "")
    if is_group_consumer(ref):
        return _group_consumer(history, ref, claim_versions, at)
    if resource != "pods":
        # Nothing in history says when a non-Pod consumer is done; never guess it is.
        return Consumer(resource, name, uid, "other")
    versions = _upto(history.versions("Pod", uid), at)
    if not versions or versions[-1].obj is None:
        since, detail = _gone_since(versions)
        return Consumer(resource, name, uid, "gone", since or _reserved_since(claim_versions, uid), detail)
    pod = versions[-1].obj
    state, detail = pod_run_state(pod, at)
    if state == "terminal":
        return Consumer(resource, name, uid, "terminal", terminal_since(pod) or versions[-1].at, detail)
    if state == "running":
        return Consumer(resource, name, uid, "running")
    failing = unsuccessful_since(versions, at)
    since = failing[0] if failing else versions[-1].at
    return Consumer(resource, name, uid, state, since, detail)


def _group_consumer(
    history: HistoryView, ref: dict[str, Any], claim_versions: Sequence[Version], at: datetime
) -> Consumer:
    """A PodGroup in ``reservedFor``: live while it exists with a member that is not finished or gone.

    Its members are the Pods naming it (``spec.schedulingGroup``); deleted ones are read from history only
    when the live ones show none still active (a group is mostly judged live by its running members).
    """
    resource, name, uid = PODGROUPS, str(ref.get("name") or ""), str(ref.get("uid") or "")
    versions = _upto(history.versions("PodGroup", uid), at)
    if not versions or versions[-1].obj is None:
        since, detail = _object_gone_since(versions)
        return Consumer(resource, name, uid, "gone", since or _reserved_since(claim_versions, uid), detail)
    group = versions[-1].obj
    key = (ns_name(group)[0], name)
    people = _members_at(history, members_of(history.state, key), claim_versions, at)
    if not any(c.state not in ("terminal", "gone") for c in people):
        seen = {c.uid for c in people}
        earlier = [pod for pod in _deleted_members(history, key) if uid_of(pod) not in seen]
        people += _members_at(history, earlier, claim_versions, at)
    active = [c for c in people if c.state not in ("terminal", "gone")]
    if any(c.state == "running" for c in active):
        running = sum(1 for c in active if c.state == "running")
        return Consumer(resource, name, uid, "running", detail=f"{running} of {len(people)} members running")
    if active:
        state = "failing" if any(c.state == "failing" for c in active) else "starting"
        detail = "; ".join(f"pod {c.name} {c.detail}" for c in active[:3])
        return Consumer(resource, name, uid, state, _latest(c.since for c in active) or versions[-1].at, detail)
    if not people:
        return Consumer(resource, name, uid, "terminal", _reserved_since(claim_versions, uid), "has no members")
    ended = sum(1 for c in people if c.state == "terminal")
    detail = f"its {_plural_members(len(people))} finished or gone ({ended} finished)"
    return Consumer(resource, name, uid, "terminal", _latest(c.since for c in people) or versions[-1].at, detail)


def _plural_members(n: int) -> str:
    return "1 member" if n == 1 else f"{n} members"


def _members_at(
    history: HistoryView, pods: Sequence[Object], claim_versions: Sequence[Version], at: datetime
) -> list[Consumer]:
    """The group's members as consumers at ``at``; a Pod created after ``at`` is no member yet."""
    out = []
    for pod in pods:
        uid = uid_of(pod)
        if _upto(history.versions("Pod", uid), at):
            ref = {"resource": "pods", "name": ns_name(pod)[1], "uid": uid}
            out.append(describe_consumer(history, ref, claim_versions, at))
    return out


def _deleted_members(history: HistoryView, key: tuple[str, str]) -> list[Object]:
    """Pods of the group deleted by the history's time (every deleted Pod read once per state)."""
    index = history.state.derived.get("gang-deleted-members")
    if index is None:
        index = {}
        for _at, pod in history.deleted("Pod").values():
            found = group_key(pod)
            if found is not None:
                index.setdefault(found, []).append(pod)
        history.state.derived["gang-deleted-members"] = index
    return list(index.get(key, ()))


def _object_gone_since(versions: Sequence[Version]) -> tuple[datetime | None, str]:
    """When an object that is gone went: its deletionTimestamp, else the version recording its disappearance."""
    seen = [v for v in versions if v.obj is not None]
    if not seen:
        return None, "never seen"
    deleting = parse_time(meta(seen[-1].obj or {}).get("deletionTimestamp"))
    after = [v.at for v in versions if v.obj is None and v.at >= seen[-1].at]
    return deleting or (after[0] if after else seen[-1].at), "deleted"


# --- conditions -------------------------------------------------------------------------------------


def _unreserved_since(claim_versions: Sequence[Version]) -> datetime:
    current = claim_versions[-1]
    since = current.at
    first_of_history = True
    for version in reversed(claim_versions[:-1]):
        if version.obj is None or consumers(version.obj) or not held_devices(version.obj):
            first_of_history = False
            break
        since = version.at
    if first_of_history:
        stamped = allocation_time(claim_versions[0].obj or {})
        if stamped is not None and stamped < since:
            since = stamped
    return since


def claim_conditions(history: HistoryView, claim_versions: Sequence[Version], at: datetime) -> list[Condition]:
    """Every leak condition that holds for the claim at ``at`` (thresholds not applied), in REASONS order."""
    versions = _upto(claim_versions, at)
    if not versions or versions[-1].obj is None:
        return []
    claim = versions[-1].obj
    if not held_devices(claim):
        return []
    found: list[Condition] = []
    refs = consumers(claim)
    people = tuple(describe_consumer(history, ref, versions, at) for ref in refs)
    deleting = parse_time(meta(claim).get("deletionTimestamp"))
    if deleting is not None and meta(claim).get("finalizers"):
        found.append(Condition(STUCK_DELETION, deleting, people))
    if not refs:
        found.append(Condition(UNRESERVED, _unreserved_since(versions)))
        return found
    states = {c.state for c in people}
    if states <= {"terminal", "gone"}:
        found.append(Condition(ORPHANED, _latest(c.since for c in people) or versions[-1].at, people))
    elif states <= {"terminal", "gone", "failing", "starting"}:
        failing = [c.since for c in people if c.state in ("failing", "starting")]
        found.append(Condition(FAILING_POD, _latest(failing) or versions[-1].at, people))
    return found


def _latest(times: Iterable[datetime | None]) -> datetime | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


def flagged_condition(
    history: HistoryView, claim_versions: Sequence[Version], at: datetime, thresholds: Thresholds
) -> Condition | None:
    """The first condition (in REASONS order) that has held for longer than its threshold at ``at``."""
    for condition in claim_conditions(history, claim_versions, at):
        if at - condition.since > thresholds.for_reason(condition.reason):
            return condition
    return None


# --- ownership and wording ---------------------------------------------------------------------------


def _controller(obj: Object) -> dict[str, Any] | None:
    refs = [r for r in meta(obj).get("ownerReferences") or () if isinstance(r, dict)]
    for ref in refs:
        if ref.get("controller"):
            return ref
    return refs[0] if refs else None


def _pod_seen(history: HistoryView, uid: str, at: datetime) -> Object | None:
    seen = [v.obj for v in _upto(history.versions("Pod", uid), at) if v.obj is not None]
    return seen[-1] if seen else None


def claim_owner(history: HistoryView, claim: Object, at: datetime) -> dict[str, Any]:
    """Who the claim belongs to: the Pod it was generated for (template) or that reserves it (direct)."""
    namespace, _ = ns_name(claim)
    ref = _controller(claim)
    annotations = meta(claim).get("annotations") or {}
    templated = (ref is not None and ref.get("kind") == "Pod") or (
        "resource.kubernetes.io/pod-claim-name" in annotations
    )
    pod_name = pod_uid = None
    workload = None
    if ref is not None and ref.get("kind") == "Pod":
        pod_name, pod_uid = ref.get("name"), ref.get("uid")
    elif ref is not None:
        workload = f"{ref.get('kind')}/{ref.get('name')}"
    if pod_uid is None:
        pods = [c for c in consumers(claim) if c.get("resource") == "pods"]
        if pods:
            pod_name, pod_uid = pods[0].get("name"), pods[0].get("uid")
    if pod_uid and workload is None:
        pod = _pod_seen(history, str(pod_uid), at)
        pod_ref = _controller(pod) if pod else None
        if pod_ref is not None:
            workload = f"{pod_ref.get('kind')}/{pod_ref.get('name')}"
    return {
        "namespace": namespace,
        "pod": pod_name,
        "pod_uid": pod_uid,
        "workload": workload,
        "source": "template" if templated else "direct",
    }


class PrepareFailures:
    """Live ``FailedPrepareDynamicResources`` events by Pod UID: (repeat count summed, last message).

    Indexed over every live event on the first ask, then shared by a report's
    claims: scanning every event per failing Pod made the report quadratic.
    """

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._by_pod: dict[str, tuple[int, str]] | None = None

    def of(self, pod_uid: str) -> tuple[int, str]:
        if self._by_pod is None:
            self._by_pod = {}
            for ev in self._state.of_kind("Event"):
                involved = ev.get("involvedObject") or {}
                if ev.get("reason") == PREPARE_FAILED_EVENT and involved.get("uid"):
                    uid = str(involved["uid"])
                    count, _ = self._by_pod.get(uid, (0, ""))
                    self._by_pod[uid] = (count + int(ev.get("count") or 1), str(ev.get("message") or ""))
        return self._by_pod.get(pod_uid, (0, ""))


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.1f} h"


def _consumer_phrase(c: Consumer) -> str:
    when = rfc3339(c.since) or "an unknown time"
    if c.resource == PODGROUPS:
        if c.state == "gone" and c.detail == "never seen":
            return f"PodGroup {c.name} is gone (absent since at least {when})"
        if c.state == "gone":
            return f"PodGroup {c.name} was deleted at {when}"
        if c.state == "terminal":
            return f"PodGroup {c.name} {c.detail} (since {when})"
        return f"PodGroup {c.name} is {c.state} ({c.detail}) since {when}"
    if c.state == "terminal":
        return f"pod {c.name} {c.detail} at {when}"
    if c.state == "gone" and c.detail == "never seen":
        return f"pod {c.name} is gone (absent since at least {when})"
    if c.state == "gone" and c.detail == "deleted":
        return f"pod {c.name} was deleted at {when}"
    if c.state == "gone":
        return f"pod {c.name} {c.detail} at {when} and has since been deleted"
    return f"pod {c.name} is {c.state} ({c.detail}) since {when}"


def leak_message(
    history: HistoryView,
    claim: Object,
    condition: Condition,
    at: datetime,
    held: int,
    failures: PrepareFailures | None = None,
) -> str:
    namespace, name = ns_name(claim)
    held_for = _hours(at - condition.since)
    devices = f"{held} device{'s' if held != 1 else ''}"
    if condition.reason == STUCK_DELETION:
        finalizers = [str(f) for f in meta(claim).get("finalizers") or ()]
        return (
            f"{namespace}/{name} was deleted at {rfc3339(condition.since)} but finalizers ({', '.join(finalizers)}) "
            f"keep it and its {devices} allocated (stuck for {held_for}): {_what_holds(finalizers, condition)}."
        )
    if condition.reason == UNRESERVED:
        return (
            f"{namespace}/{name} keeps {devices} allocated with no consumer in reservedFor "
            f"since {rfc3339(condition.since)} (unreserved for {held_for})."
        )
    phrases = "; ".join(_consumer_phrase(c) for c in condition.consumers if c.state != "other")
    if condition.reason == ORPHANED:
        every = "its only consumer" if len(condition.consumers) == 1 else "every consumer"
        return (
            f"{namespace}/{name} keeps {devices} allocated, but {every} is done: {phrases} (orphaned for {held_for})."
        )
    extra = ""
    failures = failures or PrepareFailures(history.state)
    for c in condition.consumers:
        count, message = failures.of(c.uid)
        if count:
            extra = f"; {PREPARE_FAILED_EVENT} ×{count}: {message}"
            break
    return (
        f"{namespace}/{name} keeps {devices} allocated to a Pod that has not run successfully "
        f"for {held_for}: {phrases}{extra}."
    )


DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


def _what_holds(finalizers: list[str], condition: Condition) -> str:
    """What keeps a deleted claim (its consumers, a finalizer someone else added) and what would release it.

    Kubernetes' own finalizer goes when the resourceclaim controller deallocates the claim, which it does
    once no consumer in reservedFor is left; any other finalizer is its author's to remove.
    """
    parts = []
    foreign = [f for f in finalizers if f != DELETE_PROTECTION]
    if DELETE_PROTECTION in finalizers:
        live = [c for c in condition.consumers if c.state not in ("terminal", "gone")]
        done = [c for c in condition.consumers if c.state in ("terminal", "gone")]
        if live:
            parts.append(
                f"it is still reserved for {'; '.join(_consumer_phrase(c) for c in live)}, and the resourceclaim "
                f"controller deallocates it and removes {DELETE_PROTECTION} only once no consumer is left: "
                "it is released when they end"
            )
        elif done:
            parts.append(
                f"its consumers are done ({'; '.join(_consumer_phrase(c) for c in done)}), yet reservedFor still "
                f"names them: the resourceclaim controller (kube-controller-manager) should have cleared them, "
                f"deallocated it and removed {DELETE_PROTECTION}; is it running?"
            )
        else:
            parts.append(
                f"nothing reserves it, yet it is still allocated: the resourceclaim controller "
                f"(kube-controller-manager) should have deallocated it and removed {DELETE_PROTECTION}; is it running?"
            )
    if foreign:
        whose = "it" if len(foreign) == 1 else "them"
        parts.append(
            f"{', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} not Kubernetes' own: whatever added "
            f"{whose} (a driver or controller) must remove {whose} before the claim can go"
        )
    return "; ".join(parts) or "its finalizers hold it"


# --- the report ----------------------------------------------------------------------------------------


def leak_entry(
    history: HistoryView,
    claim_versions: Sequence[Version],
    condition: Condition,
    at: datetime,
    thresholds: Thresholds,
    failures: PrepareFailures | None = None,
    inventory: Inventory | None = None,
) -> dict[str, Any]:
    claim = claim_versions[-1].obj
    assert claim is not None
    namespace, name = ns_name(claim)
    devices: list[dict[str, Any]] = list(held_devices(claim))
    since = allocation_since(claim_versions) or claim_versions[-1].at
    leaking = max(flagged_from(condition, thresholds), since)
    # Shared devices (a partition, a share of capacity) count as the fraction of the physical GPU they hold.
    fractions = claim_fractions(inventory or Inventory.of(history.state), claim)
    for device, (_, fraction) in zip(devices, fractions, strict=True):
        if fraction != 1.0:  # a whole device keeps its entry's old shape
            device["fraction"] = round(fraction, 4)
    hours = leak_hours(len(devices), sum(f for _, f in fractions), since, leaking, at)
    return {
        "uid": uid_of(claim),
        "namespace": namespace,
        "name": name,
        "reason": condition.reason,
        "devices": devices,
        "held_since": rfc3339(since),
        "device_hours": hours["device_hours"],
        "flagged_since": rfc3339(leaking),
        "leaked_device_hours": hours["leaked_device_hours"],
        "gpu_equivalent_hours": hours["gpu_equivalent_hours"],
        "leaked_gpu_equivalent_hours": hours["leaked_gpu_equivalent_hours"],
        "observed_since": rfc3339(condition.since),
        "threshold_seconds": thresholds.for_reason(condition.reason).total_seconds(),
        "owner": claim_owner(history, claim, at),
        "consumers": [c.as_dict() for c in condition.consumers],
        "message": leak_message(history, claim, condition, at, len(devices), failures),
    }


def find_leaks(
    history: HistoryView,
    thresholds: Thresholds | None = None,
    *,
    candidates: Iterable[str] | None = None,
    inventory: Inventory | None = None,
) -> dict[str, Any]:
    """Live claims that hold devices they should not, as of ``history.as_of`` (DESIGN.md's leaks JSON).

    ``candidates``: the UIDs of the only claims that can be flagged (``leak_candidates`` as of a
    snapshot no object changed since), so the others are not read at all. ``inventory``: the one
    to read GPU-equivalent fractions against (the state's by default).
    """
    thresholds = thresholds or Thresholds()
    at = history.as_of
    entries = []
    failures = PrepareFailures(history.state)
    for versions in _live_claims(history, candidates):
        condition = flagged_condition(history, versions, at, thresholds)
        if condition is not None:
            inventory = inventory or Inventory.of(history.state)
            entries.append(leak_entry(history, versions, condition, at, thresholds, failures, inventory))
    entries.sort(key=lambda e: (-e["device_hours"], e["namespace"], e["name"]))
    return {"as_of": rfc3339(at), "thresholds": thresholds.as_dict(), "claims": entries}


def leak_candidates(history: HistoryView, claim_uids: Iterable[str] | None = None) -> set[str]:
    """The claims (of ``claim_uids``, else every live one) under a leak condition now, flagged or not yet.

    Until an object changes, time alone only ends conditions (a restarted container's run
    grows past STABLE_RUN) or flags the ones that hold: no other claim can be flagged later.
    """
    return {
        uid_of(versions[-1].obj)
        for versions in _live_claims(history, claim_uids)
        if versions[-1].obj is not None and claim_conditions(history, versions, history.as_of)
    }


def leak_candidates_between(
    history: HistoryView, claim_uids: Iterable[str], start: datetime, end: datetime
) -> set[str]:
    """The claims of ``claim_uids`` under a leak condition at some change of theirs (or of their consumers)
    within ``[start, end)``, though maybe no longer at ``end``.

    A derivation that covers several stored batches judges the claims as of its own snapshot, so a
    condition that began and ended between two derived snapshots is not among ``leak_candidates``;
    the weekly review's leak intervals can still count it (a Pod's ``finishedAt`` can date it
    flagged before it ended). Conditions change only at such changes (``flagged_intervals`` reads
    the same times), so judging each one finds every claim a condition held for.
    """
    found: set[str] = set()
    for uid in sorted(claim_uids):
        versions = history.versions("ResourceClaim", uid)
        if versions and any(
            claim_conditions(history, versions, t) for t in _change_times(history, versions, start, end)
        ):
            found.add(uid)
    return found


def _live_claims(history: HistoryView, claim_uids: Iterable[str] | None) -> Iterable[list[Version]]:
    """Each live claim's versions up to ``as_of``: every claim of the state, or those of ``claim_uids``."""
    at = history.as_of
    if claim_uids is None:
        for claim in history.state.of_kind("ResourceClaim"):
            yield _upto(history.versions("ResourceClaim", uid_of(claim)), at) or [Version(at, claim)]
        return
    for uid in sorted(claim_uids):
        versions = _upto(history.versions("ResourceClaim", uid), at)
        if versions and versions[-1].obj is not None:
            yield versions


# --- leak intervals over history (the weekly review) ----------------------------------------------------


class CachedHistory:
    """A ``HistoryView`` that remembers ``versions`` answers.

    Classifying a claim at every change time asks for the same Pod versions over
    and over; against stored history each ask is a query.
    """

    def __init__(self, history: HistoryView) -> None:
        self._history = history
        self._versions: dict[tuple[str, str], list[Version]] = {}

    @property
    def as_of(self) -> datetime:
        return self._history.as_of

    @property
    def state(self) -> ClusterState:
        return self._history.state

    def versions(self, kind: str, uid: str) -> list[Version]:
        key = (kind, uid)
        if key not in self._versions:
            self._versions[key] = self._history.versions(kind, uid)
        return list(self._versions[key])

    def remember(self, kind: str, uid: str, versions: list[Version]) -> None:
        """Answer ``versions(kind, uid)`` with these: a caller that read many objects' versions at once."""
        self._versions[(kind, uid)] = versions

    def uids_named(self, kind: str, namespace: str, name: str) -> list[str]:
        return self._history.uids_named(kind, namespace, name)

    def before(self, t: datetime) -> HistoryView:
        return self._history.before(t)

    def all_versions(self, kind: str, since: datetime | None = None) -> dict[str, list[Version]]:
        return self._history.all_versions(kind, since)

    def deleted(self, kind: str) -> dict[str, tuple[datetime, Object]]:
        return self._history.deleted(kind)

    def events_about(self, uids: Collection[str], pod_names: Collection[tuple[str, str]]) -> list[list[Version]]:
        return self._history.events_about(uids, pod_names)


@dataclass(frozen=True)
class FlaggedInterval:
    """A stretch of time during which a claim was flagged, and the devices it held then."""

    start: datetime
    end: datetime
    reason: str
    devices: tuple[tuple[str, str, str], ...]


def _change_times(
    history: HistoryView, claim_versions: Sequence[Version], start: datetime, end: datetime
) -> list[datetime]:
    pods: set[str] = set()
    groups: set[tuple[str, str, str]] = set()
    times = {start}
    for version in claim_versions:
        if start < version.at < end:
            times.add(version.at)
        for ref in consumers(version.obj or {}):
            if ref.get("resource") == "pods" and ref.get("uid"):
                pods.add(str(ref["uid"]))
            elif is_group_consumer(ref) and version.obj is not None:
                groups.add((ns_name(version.obj)[0], str(ref.get("name") or ""), str(ref.get("uid") or "")))
    for namespace, name, uid in sorted(groups):
        # A PodGroup consumer changes with the group and with its members.
        times.update(v.at for v in history.versions("PodGroup", uid) if start < v.at < end)
        members = [*members_of(history.state, (namespace, name)), *_deleted_members(history, (namespace, name))]
        pods.update(uid_of(p) for p in members)
    for uid in sorted(pods):
        times.update(v.at for v in history.versions("Pod", uid) if start < v.at < end)
    return sorted(times)


def flagged_intervals(
    history: HistoryView,
    claim_versions: Sequence[Version],
    start: datetime,
    end: datetime,
    thresholds: Thresholds,
) -> list[FlaggedInterval]:
    """When, within ``[start, end)``, the claim was flagged.

    Conditions only change when the claim or one of its consumer Pods gets a new
    version, so the claim is classified once per such change. A condition that
    holds from ``t`` to the next change counts as flagged from
    ``max(observed_since + threshold, start)``: evidence found later (a
    ``finishedAt`` first seen in a later snapshot) can date it before ``t``.
    Overlapping stretches are merged.
    """
    times = _change_times(history, claim_versions, start, end)
    raw: list[FlaggedInterval] = []
    for i, t in enumerate(times):
        seg_end = times[i + 1] if i + 1 < len(times) else end
        versions = _upto(claim_versions, t)
        if not versions or versions[-1].obj is None:
            continue
        devices = tuple((d["driver"], d["pool"], d["device"]) for d in held_devices(versions[-1].obj))
        flagged = [(max(flagged_from(c, thresholds), start), c.reason) for c in claim_conditions(history, versions, t)]
        if flagged:
            first, reason = min(flagged, key=lambda f: f[0])
            if first < seg_end:
                raw.append(FlaggedInterval(first, seg_end, reason, devices))
    return _merge(raw)


def _merge(intervals: list[FlaggedInterval]) -> list[FlaggedInterval]:
    merged: list[FlaggedInterval] = []
    for iv in sorted(intervals, key=lambda i: i.start):
        if merged and iv.start <= merged[-1].end and iv.devices == merged[-1].devices:
            last = merged[-1]
            merged[-1] = FlaggedInterval(last.start, max(last.end, iv.end), iv.reason, iv.devices)
        elif merged and iv.start < merged[-1].end:
            # Devices changed mid-way (a re-allocation): the newer stretch owns the overlap.
            last = merged[-1]
            merged[-1] = FlaggedInterval(last.start, iv.start, last.reason, last.devices)
            merged.append(iv)
        else:
            merged.append(iv)
    return [iv for iv in merged if iv.end > iv.start]
