"""How pages say what the documents hold: evidence in sentences, codes with a label, times to the second.

Presentation only: the stored documents, the JSON API and the CLI keep their fields and codes
(DESIGN.md's vocabulary). A page shows a code beside its label (``admin-access-namespace`` — "a
namespace may request adminAccess"), an evidence entry as a sentence instead of a Python repr of its
fields, and a timestamp without the microseconds that snapshot times carry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

# --- codes -----------------------------------------------------------------------------------------

CODE_LABELS: dict[str, str] = {
    # blocking reasons (DESIGN.md, README's extensions)
    "claim-missing": "the claim does not exist",
    "template-missing": "the claim template does not exist",
    "device-class-missing": "the DeviceClass does not exist",
    "no-inventory": "no device of the driver is advertised",
    "selector-unsatisfiable": "no device matches the selectors",
    "insufficient-devices": "fewer matching devices than requested",
    "devices-in-use": "the matching devices are held by other claims",
    "devices-tainted": "the free devices carry taints not tolerated",
    "gang-incomplete": "the Pod's gang is incomplete",
    "scheduler-bypassed": "spec.nodeName bypassed the scheduler",
    "waiting-for-scheduler": "waiting for the scheduler",
    "binding-pending": "waiting for the driver's binding conditions",
    "binding-failed": "binding failed or timed out",
    "device-taint-eviction": "evicted by a device taint",
    "preparation-pending": "kubelet is preparing the devices",
    "preparation-failed": "kubelet or the driver failed to prepare the devices",
    "runtime-pending": "containers not started yet",
    "runtime-injection-failed": "the container cannot start with the device",
    "device-unhealthy": "kubelet reports a device unhealthy",
    # retention (leak) reasons
    "orphaned-allocation": "every consumer is finished or gone",
    "unreserved-allocation": "allocated, reserved for nobody",
    "held-by-failing-pod": "held by a Pod that does not run",
    "stuck-deletion": "deleted, but finalizers keep it",
    # audit warnings
    "stale-inventory": "slices disagree, or their node is gone",
    "double-allocator": "a device plugin and DRA advertise the same GPUs",
    "admin-access-namespace": "a namespace may request adminAccess",
    "admin-access-claim": "a claim uses adminAccess",
    "template-drift": "a claim differs from its template",
    "device-taint-rule": "a DeviceTaintRule taints devices",
    "force-deleted-claim": "a claim of a force-deleted Pod",
    # a device checked for a request
    "picked": "picked",
    "match": "matches",
    "held": "held by another claim",
    "short": "free, but shared counters or capacity are taken",
    "tainted": "carries a taint the claim does not tolerate",
    "selector-false": "the request's selector is false",
    "class-selector-false": "the DeviceClass selector is false",
    "evaluation-error": "the selector failed to evaluate",
    "capacity-unfit": "too little capacity for the request",
    "pool-refused": "the allocator refuses its pool",
    "not-reachable": "not reachable from the node",
}

# How far a request got on a node (DeviceMatch's ``stage``).
STAGE_LABELS: dict[str, str] = {
    "no-match": "no device matches its selectors",
    "too-few": "fewer devices match than it needs",
    "in-use": "enough devices match, but other claims hold them or the shared counters or capacity they need",
    "tainted": "enough free devices match, but their taints are not tolerated",
    "fits": "it fits",
}


def code_label(code: Any) -> str:
    """The human label of a vocabulary code, or "" for a code without one."""
    return CODE_LABELS.get(str(code), "") if code else ""


# --- times -----------------------------------------------------------------------------------------

_FRACTION = re.compile(r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})\.\d+")


def to_the_second(value: Any) -> Any:
    """A timestamp (or a text holding some) without fractions of a second; other values unchanged."""
    if isinstance(value, datetime):
        return value.replace(microsecond=0)
    if isinstance(value, str):
        # Most stamps have no fraction: no substitution (a week's chart has thousands of points).
        return _FRACTION.sub(r"\1", value) if "." in value else value
    return value


# --- evidence --------------------------------------------------------------------------------------


def plain(value: Any) -> str:
    """Any evidence value as words: lists joined, mappings as "key value", times to the second."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(plain(v) for v in value) if value else "none"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {plain(v)}" for k, v in value.items()) if value else "none"
    return str(to_the_second(value))


def _when(entry: Mapping[str, Any], key: str, word: str) -> str:
    value = entry.get(key)
    return f" {word} {to_the_second(value)}" if value else ""


def _said(entry: Mapping[str, Any]) -> str:
    """(reason): message"""
    out = f" ({entry['reason']})" if entry.get("reason") else ""
    return out + (f": {to_the_second(entry['message'])}" if entry.get("message") else "")


def _device(entry: Mapping[str, Any]) -> str:
    return " ".join(x for x in (str(entry.get("driver") or ""), f"{entry.get('pool')}/{entry.get('device')}") if x)


def _count(n: Any, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _condition(e: Mapping[str, Any], _ns: str) -> str:
    return f"{e.get('type')} = {e.get('status')}{_said(e)}{_when(e, 'lastTransitionTime', '· since')}"


def _event(e: Mapping[str, Any], _ns: str) -> str:
    times = "" if not e.get("count") else f" ×{e['count']}"
    span = _when(e, "first", "· first") + (f", last {to_the_second(e['last'])}" if e.get("last") else "")
    return f"{e.get('reason')}{times}: {to_the_second(e.get('message') or '')}{span}"


def _allocation_result(e: Mapping[str, Any], _ns: str) -> str:
    out = f"{_device(e)} for request {e.get('request')}"
    out += f" on node {e['node']}" if e.get("node") else ""
    return out + (f" (UUID {e['uuid']})" if e.get("uuid") else "")


def _reserved_for(e: Mapping[str, Any], ns: str) -> str:
    consumers = e.get("consumers") or []
    names = []
    for c in consumers if isinstance(consumers, list) else ():
        kind = {"pods": "Pod", "podgroups": "PodGroup"}.get(str(c.get("resource") or "pods"), str(c.get("resource")))
        name = f"{ns}/{c.get('name')}" if ns else str(c.get("name"))
        names.append(f"{kind} {name}" + (f" (uid {c['uid']})" if c.get("uid") else ""))
    return ", ".join(names) if names else "nobody"


def _device_match(e: Mapping[str, Any], _ns: str) -> str:
    if "stage" in e:  # the summary of one request on the node that got furthest
        stage = str(e.get("stage"))
        picked = e.get("picked") or []
        parts = [
            f"{_count(e.get('matching'), 'device matches', 'devices match')} its selectors",
            f"{e.get('held')} held by other claims",
            f"{e.get('short')} free but short of shared counters or capacity other claims hold",
            f"{e.get('tainted')} with taints it does not tolerate",
        ]
        return (
            f"Request {e.get('request')} (DeviceClass {e.get('class')}) on node {e.get('node')} needs "
            f"{_count(e.get('needed'), 'device')}: {', '.join(parts)}; "
            + (f"picked {', '.join(str(p) for p in picked)}" if picked else "none picked")
            + f" — {STAGE_LABELS.get(stage, stage)}."
        )
    outcome = str(e.get("outcome") or "")
    detail = next(
        (plain(e[k]) for k in ("holder", "unavailable", "selector", "taints", "why", "error", "node") if e.get(k)), ""
    )
    label = code_label(outcome) or outcome
    return f"{e.get('pool')}/{e.get('device')} for request {e.get('request')}: {label}" + (
        f" ({detail})" if detail and outcome not in ("picked",) else (f" on {detail}" if detail else "")
    )


def _container_state(e: Mapping[str, Any], _ns: str) -> str:
    state = e.get("state") or {}
    out = f"{e.get('container')}: "
    if not isinstance(state, Mapping) or not state:
        out += "no state reported"
    elif "running" in state:
        out += "running" + _when(state["running"] or {}, "startedAt", "since")
    elif "terminated" in state:
        t = state["terminated"] or {}
        out += f"terminated: exit code {t.get('exitCode', '?')}"
        out += f", {t['reason']}" if t.get("reason") else ""
        out += _when(t, "finishedAt", "at")
        out += f" ({to_the_second(t['message'])})" if t.get("message") else ""
    else:
        w = state.get("waiting") or {}
        out += "waiting" + (f": {w['reason']}" if w.get("reason") else "")
        out += f" ({to_the_second(w['message'])})" if w.get("message") else ""
    restarts = e.get("restartCount")
    return out + (f" · {_count(restarts, 'restart')}" if restarts else "")


def _resource_health(e: Mapping[str, Any], _ns: str) -> str:
    message = f": {e['message']}" if e.get("message") else ""
    return f"container {e.get('container')}, {e.get('name')}: device {e.get('resourceID')} {e.get('health')}{message}"


def _identity(e: Mapping[str, Any], _ns: str) -> str:
    verdict = {True: "matches", False: "does not match", None: "nothing to compare with"}.get(e.get("match"))
    return (
        f"container {e.get('container')} saw GPU {e.get('observed')}; allocated {plain(e.get('expected'))}: {verdict}"
    )


def _pod_claim(e: Mapping[str, Any], _ns: str) -> str:
    out = f"the Pod's claim {e.get('name')}"
    if e.get("resourceClaimTemplateName"):
        out += f" from ResourceClaimTemplate {e['resourceClaimTemplateName']}"
    if e.get("resourceClaimName"):
        out += f" is ResourceClaim {e['resourceClaimName']}"
    return out


def _resource_claim(e: Mapping[str, Any], _ns: str) -> str:
    out = f"ResourceClaim {e.get('name')}"
    if e.get("deletionTimestamp"):
        out += f" being deleted since {to_the_second(e['deletionTimestamp'])}"
    if "finalizers" in e:
        out += f", finalizers {plain(e.get('finalizers'))}"
    rest = {k: v for k, v in e.items() if k not in ("kind", "name", "deletionTimestamp", "finalizers")}
    return out + "".join(f" · {k} {plain(v)}" for k, v in rest.items())


def _device_class(e: Mapping[str, Any], _ns: str) -> str:
    return f"DeviceClass {e.get('name')} " + ("exists" if e.get("exists") else "does not exist")


def _inventory(e: Mapping[str, Any], _ns: str) -> str:
    devices, pools = _count(e.get("devices"), "device"), _count(e.get("pools"), "pool")
    return f"driver {e.get('driver')} advertises {devices} in {pools}"


def _taint(t: Mapping[str, Any]) -> str:
    value = f"={t['value']}" if t.get("value") else ""
    out = f"{t.get('key')}{value}:{t.get('effect')}"
    extra = [x for x in (_when(t, "timeAdded", "added").strip(), str(t.get("source") or "")) if x]
    return out + (f" ({', '.join(extra)})" if extra else "")


def _device_entry(e: Mapping[str, Any], _ns: str) -> str:
    out = _device(e) + (f" on node {e['node']}" if e.get("node") else "")
    out += f", slice {e['slice']}" if e.get("slice") else ""
    out += f", UUID {e['uuid']}" if e.get("uuid") else ""
    out += ": advertised" if e.get("advertised", True) else ": no longer advertised"
    taints = e.get("taints") or []
    if taints:
        out += "; taints " + "; ".join(_taint(t) for t in taints if isinstance(t, Mapping))
    return out


def _taint_rule(e: Mapping[str, Any], _ns: str) -> str:
    selector = e.get("deviceSelector") or {}
    selects = "/".join(str(selector.get(k)) for k in ("driver", "pool", "device") if selector.get(k))
    out = f"{e.get('name')}" + (f" selects {selects}" if selects else "")
    taint = e.get("taint")
    out += f": taint {_taint(taint)}" if isinstance(taint, Mapping) else ""
    cond = e.get("evictionInProgress")
    if isinstance(cond, Mapping):
        out += f"; EvictionInProgress = {cond.get('status')}{_said(cond)}{_when(cond, 'lastTransitionTime', '· since')}"
    return out


def _pod_group(e: Mapping[str, Any], _ns: str) -> str:
    name = f"PodGroup {e.get('namespace')}/{e.get('name')}"
    if not e.get("exists"):
        return f"{name} does not exist"
    parts = [f"minCount {e['minCount']}" if e.get("minCount") is not None else ""]
    parts.append(f"{e['members']} members" if "members" in e else "")
    parts.append(f"{e['schedulable']} schedulable" if "schedulable" in e else "")
    return f"{name}: " + ", ".join(p for p in parts if p)


def _pod_spec(e: Mapping[str, Any], _ns: str) -> str:
    return f"spec.nodeName is {e.get('nodeName')}: the Pod was placed without the scheduler"


def _binding(e: Mapping[str, Any], _ns: str) -> str:
    out = f"{_device(e)} waits for binding conditions {plain(e.get('bindingConditions'))}"
    if e.get("bindingFailureConditions"):
        out += f" (failure conditions {plain(e['bindingFailureConditions'])})"
    reported = [r for r in e.get("reported") or [] if isinstance(r, Mapping)]
    return out + ("; reported " + "; ".join(_condition(r, "") for r in reported) if reported else "; none reported")


def _device_condition(e: Mapping[str, Any], _ns: str) -> str:
    binding = " (a binding condition)" if e.get("binding") else ""
    return f"{_device(e)}: {_condition(e, '')}{binding}"


def _extended_request(e: Mapping[str, Any], _ns: str) -> str:
    return (
        f"container {e.get('container')} asks for {e.get('resource')}: {e.get('quantity')} "
        f"(DeviceClass {e.get('class')}, request {e.get('request')})"
    )


EVIDENCE: dict[str, tuple[str, Callable[[Mapping[str, Any], str], str]]] = {
    "Condition": ("Pod condition", _condition),
    "Event": ("Event", _event),
    "AllocationResult": ("Allocated", _allocation_result),
    "ReservedFor": ("Reserved for", _reserved_for),
    "DeviceMatch": ("Device search", _device_match),
    "ContainerState": ("Container", _container_state),
    "ResourceHealth": ("Device health", _resource_health),
    "Identity": ("GPU identity", _identity),
    "PodClaim": ("Pod claim", _pod_claim),
    "ResourceClaim": ("Claim", _resource_claim),
    "DeviceClass": ("DeviceClass", _device_class),
    "Inventory": ("Inventory", _inventory),
    "Device": ("Device", _device_entry),
    "DeviceTaintRule": ("Taint rule", _taint_rule),
    "PodGroup": ("PodGroup", _pod_group),
    "PodSpec": ("Pod spec", _pod_spec),
    "BindingConditions": ("Binding", _binding),
    "DeviceCondition": ("Device condition", _device_condition),
    "ExtendedResourceRequest": ("Extended resource", _extended_request),
}


def describe_evidence(entry: Mapping[str, Any], namespace: str = "") -> tuple[str, str]:
    """(what it is, a sentence) for one evidence entry; an unknown kind lists its fields as words."""
    kind = str(entry.get("kind") or "")
    known = EVIDENCE.get(kind)
    if known is not None:
        label, say = known
        try:
            return label, say(entry, namespace)
        except (AttributeError, KeyError, TypeError):  # an odd entry still reads as its fields
            pass
    fields = [f"{k} {plain(v)}" for k, v in entry.items() if k != "kind"]
    return kind or "Evidence", " · ".join(fields)
