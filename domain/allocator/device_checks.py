"""Device checks: every advertised device against a class + request selector set, and why they fail.

A check is per device and selector set, independent of nodes and of what is
allocated; simulations and match-devices share them (the CEL evaluation is the
expensive part). The summaries group failing devices by the values the failing
selector reads ("all 8 have memory 40Gi").
"""

from __future__ import annotations

import functools
import hashlib
import re
import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import orjson

from domain.allocator.cel import (
    CompiledSelector,
    Device,
    SelectorCompileError,
    SelectorEvaluationError,
    compile_selector,
)
from domain.allocator.device_projection import Outline, Ref, outline, projection_keys
from domain.cluster.quantity import Quantity, QuantityError
from domain.inventory.devices import AdvertisedDevice, DeviceId, Inventory

# --- selectors over devices ------------------------------------------------------------------------

T = TypeVar("T")
Memos = Callable[[Hashable], dict[DeviceId, Any]]  # SelectorCache.memo

MATCH = "match"
CLASS_FALSE = "class-selector-false"
SELECTOR_FALSE = "selector-false"
ERROR = "error"


@dataclass(frozen=True)
class DeviceCheck:
    device: AdvertisedDevice
    outcome: str  # MATCH | CLASS_FALSE | SELECTOR_FALSE | ERROR
    expression: str | None = None  # the selector that said no, or failed
    error: str | None = None
    from_class: bool = False  # whether that selector is the DeviceClass's

    @property
    def matched(self) -> bool:
        return self.outcome == MATCH


class Verdict(NamedTuple):
    """What check_device says of a device, without the device: devices alike share one."""

    outcome: str  # MATCH | CLASS_FALSE | SELECTOR_FALSE | ERROR
    expression: str | None = None
    error: str | None = None
    from_class: bool = False


V = TypeVar("V")


def _without(known: dict[DeviceId, V], gone: set[DeviceId]) -> dict[DeviceId, V]:
    """``known`` without the devices in ``gone``: copied whole, then the few gone removed (a slice
    change changes a few of 40,000 devices; a comprehension would visit each in Python)."""
    fresh = dict(known)
    for device_id in gone:
        fresh.pop(device_id, None)
    return fresh


# The memos a selector cache keeps, the least recently asked dropped first: 40,000 devices' entries of
# one expression weigh ~20 MB (its verdicts, refusals and grouped values), and one answer asks four or
# five memos, so about the last three expressions asked of a cluster are carried over slice changes.
MEMOS = 12


class SelectorCache:
    """Compiled selectors and CEL devices, built once per analysis."""

    def __init__(self) -> None:
        self._devices: dict[DeviceId, tuple[bytes, Device]] = {}
        self._outlines: dict[DeviceId, Outline] = {}
        self._aligned: tuple[Sequence[AdvertisedDevice], list[Outline]] | None = None
        self._compiled: dict[str, CompiledSelector | SelectorCompileError] = {}
        # Every pending claim of a report asks the same class selector of the same devices.
        self._results: dict[tuple[str, DeviceId], tuple[bool, str | None]] = {}
        self._checks: dict[tuple[tuple[str, ...], tuple[str, ...]], list[DeviceCheck]] = {}
        # The same selectors over the inventory's devices again (match-devices asked twice of one
        # snapshot): the answers, not only the projections, are the snapshot's.
        self._verdicts: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[Sequence[AdvertisedDevice], list[Verdict]]]
        self._verdicts = {}
        # What is known of each device by its id, per question (``memo``): carried to the next snapshot's
        # cache while the device is unchanged, so that after a slice change only the changed devices are
        # asked again. And per selector set, the verdict of each projection (devices alike in what the
        # selectors read answer alike, whichever snapshot they are in).
        self._memos: dict[Hashable, dict[DeviceId, Any]] = {}
        self._groups: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[Hashable, Verdict]] = {}
        # What follows from those verdicts alone (match-devices' why-not sentences), kept beside them.
        self._after: dict[Hashable, tuple[Sequence[AdvertisedDevice], Any]] = {}

    def carried(self, gone: set[DeviceId]) -> SelectorCache:
        """A cache for the next list of devices, in which those in ``gone`` changed or are no longer
        listed: what was learnt of each of the others (its CEL device, its outline, each selector's
        answer, the memos) goes along; nothing else does."""
        fresh = SelectorCache()
        fresh._devices = _without(self._devices, gone)
        fresh._outlines = _without(self._outlines, gone)
        fresh._compiled = dict(self._compiled)
        fresh._results = {k: v for k, v in self._results.items() if k[1] not in gone}
        fresh._memos = {what: _without(known, gone) for what, known in self._memos.items()}
        fresh._groups = self._groups  # what a projection answers does not depend on the devices listed
        return fresh

    def device(self, device: AdvertisedDevice) -> Device:
        return self._known(device)[1]

    def _known(self, device: AdvertisedDevice) -> tuple[bytes, Device]:
        known = self._devices.get(device.id)
        if known is None:
            known = self._devices[device.id] = _advertised(device)
        return known

    def _outline(self, device: AdvertisedDevice, device_id: DeviceId) -> Outline:
        seen = self._outlines.get(device_id)
        if seen is None:
            seen = self._outlines[device_id] = outline(device.driver, device.entry)
        return seen

    def _outlines_of(self, devices: Sequence[AdvertisedDevice]) -> list[Outline]:
        if self._aligned is not None and self._aligned[0] is devices and len(self._aligned[1]) == len(devices):
            return self._aligned[1]  # the inventory's devices again: another selector over this state
        found = [self._outline(d, (d.driver, d.pool, d.name)) for d in devices]
        self._aligned = (devices, found)
        return found

    def checks(
        self, devices: Sequence[AdvertisedDevice], class_exprs: Sequence[str], request_exprs: Sequence[str]
    ) -> list[DeviceCheck]:
        """Every device checked against one class + request selector set, once per analysis.

        Pending Pods of one workload ask the same thing; a report over all of them
        would otherwise walk every device once per Pod. The list is shared: read it only.
        """
        key = (tuple(class_exprs), tuple(request_exprs))
        found = self._checks.get(key)
        if found is None:
            verdicts = self.verdicts(devices, class_exprs, request_exprs)
            found = self._checks[key] = [DeviceCheck(d, *v) for d, v in zip(devices, verdicts, strict=True)]
        return found

    def verdicts(
        self, devices: Sequence[AdvertisedDevice], class_exprs: Sequence[str], request_exprs: Sequence[str]
    ) -> list[Verdict]:
        """check_device of every device, in order; devices that agree on all the selectors read share one.

        When every selector is projectable, devices equal in the projection on all their references
        get the same answer from each selector, so one device of each such group is checked.
        """
        asked = (tuple(class_exprs), tuple(request_exprs))
        known = self._verdicts.get(asked)
        if known is not None and known[0] is devices:
            # In use: its memo becomes the most recent (filled again if it had been dropped), as the
            # next snapshot's first answer needs it most.
            by_device = self.memo(("verdict", asked))
            if len(by_device) < len(devices):
                by_device.update(zip([d.id for d in devices], known[1], strict=True))
            return known[1]
        refs: list[Ref] = []
        for expr in (*class_exprs, *request_exprs):
            own = _projectable(expr)
            if own is None:
                return [_verdict(check_device(self, d, class_exprs, request_exprs)) for d in devices]
            refs += [r for r in own if r not in refs]
        if len(self._verdicts) >= 64:  # one per expression asked of the snapshot: bounded all the same
            self._verdicts.clear()
            self._groups.clear()
        # Each device's verdict is kept by its id, and carried to the next snapshot's cache while the
        # device is unchanged: after a slice change only the changed devices are projected.
        by_device = self.memo(("verdict", asked))
        fresh = [d for d in devices if d.id not in by_device]
        if fresh:
            groups = self._groups.setdefault(asked, {})
            if len(fresh) == len(devices):
                outlines = self._outlines_of(devices)
            else:
                outlines = [self._outline(d, d.id) for d in fresh]
            for device, key in zip(fresh, projection_keys(outlines, tuple(refs)), strict=True):
                verdict = groups.get(key)
                if verdict is None:
                    verdict = groups[key] = _verdict(check_device(self, device, class_exprs, request_exprs))
                by_device[device.id] = verdict
        found = [by_device[d.id] for d in devices]
        self._verdicts[asked] = (devices, found)  # the list is held, so ``is`` cannot match another
        return found

    def memo(self, what: Hashable) -> dict[DeviceId, Any]:
        """What the caller learns of each device for ``what`` (a question naming everything its answer
        depends on besides the device), by device id: the caller fills it. It goes to the next
        snapshot's cache for the devices that did not change (``carried``)."""
        known = self._memos.pop(what, None)
        if known is None:
            known = {}
            if len(self._memos) >= MEMOS:
                del self._memos[next(iter(self._memos))]  # the one asked least recently
        self._memos[what] = known  # last in the order: asked most recently
        return known

    def kept(self, devices: Sequence[AdvertisedDevice], key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()`` of what ``devices``' verdicts alone decide, once per ``key`` and list of devices."""
        known = self._after.get(key)
        if known is not None and known[0] is devices:
            return known[1]  # type: ignore[no-any-return]
        if len(self._after) >= 64:  # as the verdicts: one per expression asked, bounded all the same
            self._after.clear()
        value = compute()
        self._after[key] = (devices, value)
        return value

    def evaluate(self, expr: str, device: AdvertisedDevice) -> tuple[bool, str | None]:
        """(matched, error); a selector that does not compile is an error on every device."""
        device_id = device.id
        key = (expr, device_id)
        result = self._results.get(key)
        if result is None:
            refs = _projectable(expr)
            if refs is None:
                digest, _ = self._known(device)
                content = (expr, False, digest)
                result = _RESULTS.get(content)
                if result is None:
                    result = _remember(_RESULTS, content, self._evaluate(expr, device))
            else:
                # Devices alike in what the selector reads need neither their content hashed nor
                # a conversion for CEL: one of them answers for all, in this state and the next.
                grouped = (expr, True, projection_keys((self._outline(device, device_id),), refs)[0])
                result = _RESULTS.get(grouped)
                if result is None:
                    result = _remember(_RESULTS, grouped, self._evaluate(expr, device))
            self._results[key] = result
        return result

    def _evaluate(self, expr: str, device: AdvertisedDevice) -> tuple[bool, str | None]:
        compiled = self._compiled.get(expr)
        if compiled is None:
            try:
                compiled = compile_selector(expr)
            except SelectorCompileError as exc:
                compiled = exc
            self._compiled[expr] = compiled
        if isinstance(compiled, SelectorCompileError):
            return False, f"selector does not compile: {compiled}"
        try:
            return bool(compiled.matches(self.device(device))), None
        except SelectorEvaluationError as exc:
            return False, str(exc)


def _verdict(check: DeviceCheck) -> Verdict:
    return Verdict(check.outcome, check.expression, check.error, check.from_class)


# CEL's view of a device and what each selector said of it, by the device's driver and advertised
# content rather than by snapshot: every snapshot lists every slice again, but few devices change
# between two, and converting a device for CEL is most of what a selector costs. A change to the
# device's entry is a new key. A projectable selector's answers are kept by projection key instead
# (device_projection), which needs no hash and converts one device per group. Bounded: a process
# that saw too many is emptied and starts again (a converted device is ~3.5 KB: 100,000 of them,
# 2.5 clusters of 40,000 GPUs, are ~350 MB).
_DEVICES_MAX = 100_000
_RESULTS_MAX = 250_000
_DEVICES: dict[bytes, Device] = {}
_RESULTS: dict[tuple[str, bool, Hashable], tuple[bool, str | None]] = {}


def _remember(known: dict[Any, Any], key: Any, value: Any, most: int = _RESULTS_MAX) -> Any:
    if len(known) >= most:
        known.clear()
    known[key] = value
    return value


def _advertised(device: AdvertisedDevice) -> tuple[bytes, Device]:
    content = orjson.dumps([device.driver, device.entry], option=orjson.OPT_SORT_KEYS)
    key = hashlib.blake2b(content, digest_size=16).digest()
    cel_device = _DEVICES.get(key)
    if cel_device is None:
        cel_device = _remember(_DEVICES, key, Device.from_slice_entry(device.driver, dict(device.entry)), _DEVICES_MAX)
    return key, cel_device


# A selector that reads the device only through attribute and capacity lookups by literal domain
# and name (and device.driver) answers alike for devices that agree on those: a cluster's GPUs of
# one model differ in UUIDs and PCI addresses, which such a selector never reads, so it is
# evaluated once per model rather than once per device.
_PROJECTABLE: dict[str, tuple[Ref, ...] | None] = {}
_DEVICE_WORD = re.compile(r"\bdevice\b")


def _projectable(expr: str) -> tuple[Ref, ...] | None:
    """The references ``expr`` reads devices through, or None when it may read them otherwise."""
    if expr in _PROJECTABLE:
        return _PROJECTABLE[expr]
    refs: tuple[Ref, ...] | None = tuple(r for r in selector_references(expr) if r[0] != "driver")
    for m in _REF.finditer(expr):
        # A method on the domain's map (exists(), all()…) reads every entry; an escape hides the real key.
        if expr[m.end() :].lstrip().startswith("(") or "\\" in m.group(0):
            refs = None
    rest = _REF.sub(" ", expr).replace("device.driver", " ")
    if _DEVICE_WORD.search(rest):
        refs = None  # the device read some other way: as a whole map, through a macro variable…
    return _remember(_PROJECTABLE, expr, refs)


_CACHES: weakref.WeakKeyDictionary[Inventory, SelectorCache] = weakref.WeakKeyDictionary()


def selector_cache(inventory: Inventory) -> SelectorCache:
    """One cache per inventory (one state), shared by every simulation over it."""
    cache = _CACHES.get(inventory)
    if cache is None:
        cache = _CACHES[inventory] = SelectorCache()
    return cache


def check_device(
    cache: SelectorCache, device: AdvertisedDevice, class_exprs: Sequence[str], request_exprs: Sequence[str]
) -> DeviceCheck:
    """Class selectors first, then the request's; the first that says no decides."""
    for exprs, from_class in ((class_exprs, True), (request_exprs, False)):
        for expr in exprs:
            ok, error = cache.evaluate(expr, device)
            if error is not None:
                return DeviceCheck(device, ERROR, expr, error, from_class)
            if not ok:
                return DeviceCheck(device, CLASS_FALSE if from_class else SELECTOR_FALSE, expr, None, from_class)
    return DeviceCheck(device, MATCH)


# --- summaries of why devices fail -----------------------------------------------------------------

_REF = re.compile(
    r"""device\.(attributes|capacity)\s*\[\s*(['"])([^'"]+)\2\s*\]\s*(?:\.\s*([A-Za-z_]\w*)|\[\s*(['"])([^'"]+)\5\s*\])"""
)


def selector_references(expr: str) -> list[tuple[str, str, str]]:
    """``(kind, domain, name)`` of the attributes/capacities an expression reads; kind ``driver`` too."""
    refs: list[tuple[str, str, str]] = []
    for m in _REF.finditer(expr):
        ref = (m.group(1), m.group(3), m.group(4) or m.group(6))
        if ref not in refs:
            refs.append(ref)
    if "device.driver" in expr:
        refs.append(("driver", "", "driver"))
    return refs


@functools.lru_cache(maxsize=4096)  # a fleet's devices spell their capacities a few ways
def _quantity_key(value: str) -> Any:
    try:
        return Quantity.parse(value).nanos
    except QuantityError:
        return value


def _raw_of(device: AdvertisedDevice, ref: tuple[str, str, str]) -> Any:
    kind, domain, name = ref
    if kind == "driver":
        return device.driver
    if kind == "capacity":
        return device.capacity_value(name, domain)
    value = device.attribute(name, domain)
    # A malformed attribute (a list where a scalar belongs) is grouped by its text: it cannot be hashed.
    return str(value) if isinstance(value, (list, dict)) else value


def _shown(ref: tuple[str, str, str], raw: Any) -> tuple[Any, str]:
    """(grouping key, how to show it) of one reference's value as ``_raw_of`` read it."""
    kind, _, name = ref
    if kind == "driver":
        return raw, f"driver {raw}"
    if raw is None:
        return None, f"no {name}"
    if kind == "capacity":
        return _quantity_key(raw), f"{name} {raw}"
    shown = f"'{raw}'" if isinstance(raw, str) and " " in raw else str(raw)
    return raw, f"{name} {shown}"


Values = tuple[tuple[type, Any], ...]  # what one device's references read, each value with its type


def values_read(device: AdvertisedDevice, refs: tuple[tuple[str, str, str], ...], known: dict[DeviceId, Any]) -> Values:
    """The values ``refs`` read of ``device`` as stored (with their types, so that 1 and true stay apart),
    kept in ``known`` (a ``SelectorCache.memo`` of these references) by the device's id."""
    values: Values | None = known.get(device.id)
    if values is None:
        values = known[device.id] = tuple([(type(raw), raw) for raw in [_raw_of(device, r) for r in refs]])
    return values


def counted_phrase(
    refs: tuple[tuple[str, str, str], ...], counts: Counter[Values], drivers: set[str], total: int
) -> str:
    """E.g. "all 8 have memory 40Gi" or "3 have memory 80Gi and 1 has memory 24Gi": the failing devices'
    values counted in the devices' order (``values_read``), and their drivers."""
    # Thousands of devices read a few values: counted by the values as stored, then each distinct one
    # keyed and spelt once, in first-seen order.
    if len(drivers) == 1 and any(r[0] == "driver" for r in refs):
        kept = [i for i, r in enumerate(refs) if r[0] != "driver"]  # the same for every device: says nothing
        refs = tuple(refs[i] for i in kept)
        fewer: Counter[Values] = Counter()
        for values, n in counts.items():
            fewer[tuple([values[i] for i in kept])] += n
        counts = fewer
    shown_as: dict[tuple[Any, ...], Counter[str]] = {}
    for values, n in counts.items():
        pairs = [_shown(r, raw) for r, (_, raw) in zip(refs, values, strict=True)]
        key = tuple([k for k, _ in pairs])
        # 80Gi and 81920Mi group together; show the spelling most devices use
        spellings = shown_as.get(key)
        if spellings is None:
            spellings = shown_as[key] = Counter()
        spellings[" and ".join([s for _, s in pairs])] += n
    ranked = Counter({key: spellings.total() for key, spellings in shown_as.items()}).most_common()  # first seen first
    phrases = []
    for key, n in ranked[:3]:
        desc = shown_as[key].most_common(1)[0][0]
        who = str(n)
        if len(ranked) == 1 and n == total and n > 1:
            who = "both" if n == 2 else f"all {n}"
        verb = "has" if who == "1" else "have"
        phrases.append(f"{who} {verb} {desc}" if desc else who)
    if len(ranked) > 3:
        phrases.append(f"{sum(n for _, n in ranked[3:])} more have other values")
    if len(phrases) > 1:
        return ", ".join(phrases[:-1]) + " and " + phrases[-1]
    return phrases[0] if phrases else "none"


def summarize_checks(checks: list[DeviceCheck], class_name: str, drivers: set[str]) -> str:
    """Why the devices a class could offer fail an ask, grouped by the values the selectors read.

    E.g. "8 devices of class gpu.nvidia.com checked, all 8 have memory 40Gi, which the
    request selector `…` rejects".
    """
    considered = [c for c in checks if not drivers or c.device.driver in drivers]
    in_class = [c for c in considered if c.outcome != CLASS_FALSE and not (c.outcome == ERROR and c.from_class)]
    parts: list[str] = []
    if not in_class:
        scope = f"driver {', '.join(sorted(drivers))}" if drivers else "any driver"
        parts.append(f"{len(considered)} devices of {scope} checked, none is in class {class_name}")
        parts += fail_phrases([c for c in considered if c.outcome == CLASS_FALSE], "class", len(considered))
    else:
        noun = "device" if len(in_class) == 1 else "devices"
        parts.append(f"{len(in_class)} {noun} of class {class_name} checked")
        parts += fail_phrases([c for c in in_class if c.outcome == SELECTOR_FALSE], "request", len(in_class))
    errors = [c for c in considered if c.outcome == ERROR]
    if errors:
        first = errors[0]
        parts.append(f"{len(errors)} could not be evaluated ({first.error} in `{first.expression}`)")
    return ", ".join(parts)


def fail_phrases(failed: list[DeviceCheck], whose: str, total: int, memos: Memos | None = None) -> list[str]:
    """One sentence per selector that said no, grouping its devices by the values it reads; ``memos``
    (``SelectorCache.memo``) keeps each device's values for the next asking."""
    by_expr: dict[str, list[DeviceCheck]] = {}
    for check in failed:
        by_expr.setdefault(check.expression or "", []).append(check)
    sentences = []
    for expr, group in by_expr.items():
        refs = tuple(selector_references(expr))
        known = memos(("values", refs)) if memos is not None else {}
        counted = Counter([values_read(c.device, refs, known) for c in group])
        sentences.append(rejected_by(whose, expr, counted, {c.device.driver for c in group}, total))
    return sentences


def rejected_by(whose: str, expr: str, counted: Counter[Values], drivers: set[str], total: int) -> str:
    """The sentence of one selector (the ``whose``'s: class or request) that rejected devices whose
    values it reads are ``counted`` (``values_read``, in the devices' order) and ``drivers`` theirs."""
    phrase = counted_phrase(tuple(selector_references(expr)), counted, drivers, total)
    return f"{phrase}, which the {whose} selector `{expr}` rejects"
