"""Why the scheduler's allocator refuses a resource pool as a whole.

The allocator (k8s.io/dynamic-resource-allocation/structured, ``GatherPools``/``buildPool``) checks each pool
it reads from a node before allocating any of its devices. A pool it finds invalid gives nothing, not even its
sound devices, and a request for ``allocationMode: All`` fails on a node that sees an invalid or incomplete pool.
What makes a pool invalid, from its current generation's slices:

- a device consumes from a counter set that none of the pool's slices advertises,
- or a counter its counter set does not have,
- two slices advertise a counter set of one name, or two devices share a name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.cluster.state import Object


def _spec(slice_obj: Object) -> dict[str, Any]:
    spec = slice_obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _entries(raw: Any) -> list[dict[str, Any]]:
    return [e for e in raw or () if isinstance(e, dict)]


def pool_problem(slices: Iterable[Object]) -> str | None:
    """Why the allocator refuses the pool these slices (its current generation) make up; None when it does not."""
    slices = list(slices)
    counter_sets: dict[str, set[str]] = {}
    for slice_obj in slices:
        for counter_set in _entries(_spec(slice_obj).get("sharedCounters")):
            name = str(counter_set.get("name") or "")
            if name in counter_sets:
                return f"two slices advertise counter set {name}"
            counters = counter_set.get("counters")
            counter_sets[name] = set(counters) if isinstance(counters, dict) else set()
    names: set[str] = set()
    for slice_obj in slices:
        for device in _entries(_spec(slice_obj).get("devices")):
            basic = device.get("basic")  # v1beta1 nests a device's fields
            body: dict[str, Any] = basic if isinstance(basic, dict) else device
            name = str(device.get("name") or "")
            if name in names:
                return f"two devices are named {name}"
            names.add(name)
            for use in _entries(body.get("consumesCounters")):
                wanted = str(use.get("counterSet") or "")
                if wanted not in counter_sets:
                    return f"device {name} consumes counter set {wanted}, which no slice of the pool advertises"
                counters = use.get("counters")
                for counter in counters if isinstance(counters, dict) else ():
                    if counter not in counter_sets[wanted]:
                        return f"device {name} consumes counter {counter}, which counter set {wanted} does not have"
    return None
