"""Choosing devices that go together: a bounded backtracking search, like the allocator's.

The allocator tries, request after request and device after device in pool
order, the first combination that satisfies every constraint and every counter
and capacity; a subrequest of ``firstAvailable`` is tried only when the ones
before it have no solution. The search here does the same over candidates the
simulator already filtered (matching, reachable, free, tolerated), with a step
budget so a hopeless combination over thousands of devices stays cheap. The
first path is taken without backtracking when nothing can conflict, which is
the common case.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.allocator.constraints import Constraint, Picked, violated
from domain.inventory.devices import AdvertisedDevice, DeviceId

BUDGET = 20_000  # device placements tried per search


@dataclass(frozen=True, eq=False)
class Choice:
    """One way to satisfy a request: an ask, how many devices, from which candidates (in order).

    Constraints are a claim's: a search over several claims gives each choice its claim (``scope``) and that
    claim's constraints, which then span only the devices picked for the same claim.

    A choice of ``every`` candidate (``allocationMode: All``) takes them in order as the allocator does: the first
    one ``blocked`` (held, short or tainted) or not free for the Pod fails the choice, and the first one that breaks
    a constraint ends the whole search, since the allocator gives up on the node there (an error, not a no-fit).
    """

    ask_name: str
    needed: int
    candidates: Sequence[AdvertisedDevice]
    handle: Any = None  # the caller's ask
    scope: int = 0
    constraints: Sequence[Constraint] | None = None  # None: the search's
    every: bool = False
    blocked: frozenset[DeviceId] = frozenset()


# Tries to take a device for a choice: an undo when it fits, None when it does not.
Taker = Callable[[Choice, AdvertisedDevice], Callable[[], None] | None]


@dataclass
class Outcome:
    picks: list[tuple[Choice, list[AdvertisedDevice]]] | None
    constraint_rejections: Counter[Constraint] = field(default_factory=Counter)
    take_rejections: int = 0
    exhausted: bool = False
    gave_up: tuple[Choice, Constraint] | None = None  # an "All" choice broke a constraint: the allocator errs

    @property
    def stopped(self) -> bool:
        return self.exhausted or self.gave_up is not None

    @property
    def found(self) -> bool:
        return self.picks is not None

    def blocking_constraint(self) -> Constraint | None:
        return self.constraint_rejections.most_common(1)[0][0] if self.constraint_rejections else None


class _Search:
    def __init__(
        self,
        slots: Sequence[Sequence[Choice]],
        constraints: Sequence[Constraint],
        take: Taker,
        earlier: Sequence[Picked],
        budget: int,
    ) -> None:
        self.slots = slots
        self.constraints = constraints
        self.take = take
        self.picked: dict[int, list[Picked]] = {0: list(earlier)}  # per scope
        self.budget = budget
        self.outcome = Outcome(None)

    def request(self, index: int) -> list[tuple[Choice, list[AdvertisedDevice]]] | None:
        if index == len(self.slots):
            return []
        for choice in self.slots[index]:
            found = self.every(index, choice, []) if choice.every else self.devices(index, choice, 0, [])
            if found is not None or self.outcome.stopped:
                return found
        return None

    def every(
        self, index: int, choice: Choice, chosen: list[AdvertisedDevice]
    ) -> list[tuple[Choice, list[AdvertisedDevice]]] | None:
        if len(chosen) == len(choice.candidates):
            rest = self.request(index + 1)
            return None if rest is None else [(choice, list(chosen)), *rest]
        self.budget -= 1
        if self.budget < 0:
            self.outcome.exhausted = True
            return None
        device = choice.candidates[len(chosen)]
        if device.id in choice.blocked:
            return None
        undo = self.take(choice, device)
        if undo is None:
            self.outcome.take_rejections += 1
            return None
        constraints = self.constraints if choice.constraints is None else choice.constraints
        picked = self.picked.setdefault(choice.scope, [])
        broken = violated(constraints, picked, choice.ask_name, device) if constraints else None
        if broken is not None:
            undo()
            self.outcome.gave_up = (choice, broken)
            return None
        chosen.append(device)
        picked.append((choice.ask_name, device))
        found = self.every(index, choice, chosen)
        if found is None:
            picked.pop()
            chosen.pop()
            undo()
        return found

    def devices(
        self, index: int, choice: Choice, start: int, chosen: list[AdvertisedDevice]
    ) -> list[tuple[Choice, list[AdvertisedDevice]]] | None:
        if len(chosen) == choice.needed:
            rest = self.request(index + 1)
            return None if rest is None else [(choice, list(chosen)), *rest]
        still = choice.needed - len(chosen)
        constraints = self.constraints if choice.constraints is None else choice.constraints
        picked = self.picked.setdefault(choice.scope, [])
        for position in range(start, len(choice.candidates) - still + 1):
            self.budget -= 1
            if self.budget < 0:
                self.outcome.exhausted = True
                return None
            device = choice.candidates[position]
            broken = violated(constraints, picked, choice.ask_name, device) if constraints else None
            if broken is not None:
                self.outcome.constraint_rejections[broken] += 1
                continue
            undo = self.take(choice, device)
            if undo is None:
                self.outcome.take_rejections += 1
                continue
            chosen.append(device)
            picked.append((choice.ask_name, device))
            found = self.devices(index, choice, position + 1, chosen)
            if found is not None:
                return found  # keep what the solution took
            picked.pop()
            chosen.pop()
            undo()
            if self.outcome.stopped:
                return None
        return None


def search(
    slots: Sequence[Sequence[Choice]],
    constraints: Sequence[Constraint],
    take: Taker,
    earlier: Sequence[Picked] = (),
    budget: int = BUDGET,
) -> Outcome:
    """The first combination: per slot (a request) one of its choices, each with ``needed`` devices.

    ``earlier`` are devices the claim's previous requests took (constraints
    span them). On success what ``take`` took for the solution stays taken.
    """
    run = _Search(slots, constraints, take, earlier, budget)
    run.outcome.picks = run.request(0)
    return run.outcome
