"""Bounds on evaluating a selector someone typed: the selector playground, /api/match-devices and
the ``match-devices`` command.

A selector is first held to Kubernetes' cost limit (the API server would reject one estimated over
it: ``SelectorCostError``). Then its evaluation is bounded in time and memory, because the cost
estimate does not bound the time of every selector under the limit (Kubernetes itself spends 5 s
on ``size()`` of a 131,072-character string 10,000 times, estimated at 87,848):

* A selector estimated at most ``Limits.in_process_cost`` (1,000: ordinary selectors are a few
  tens) runs in the request's process, under an ``evaluation_budget`` of ``Limits.seconds`` of CPU
  time for CEL evaluation in all. At that cost one evaluation takes a millisecond or so at worst,
  so the budget, checked before each evaluation, is kept to within one.
* A dearer one runs in a forked child process, whose address space may grow by
  ``Limits.memory_mb`` at most and which is killed as soon as its CEL evaluation has taken
  ``Limits.seconds`` of CPU time (the child publishes its evaluation clock in shared memory and the
  parent watches it, since one evaluation cannot be interrupted from within) or its whole run
  ``Limits.wall_seconds`` of wall-clock time.

CPU time, not wall-clock time, is what the budget counts: on a loaded machine a legitimate
selector evaluated on each of 40,000 devices can take seconds of wall-clock time.

Either way the caller gets ``SelectorTimeLimit`` or ``SelectorMemoryLimit`` (``SelectorLimitExceeded``)
with a message naming the limit, and the process serving it stays responsive.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import resource
import select
import signal
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from domain.allocator.cel import (
    SelectorCompileError,
    SelectorLimitExceeded,
    SelectorTimeLimit,
    compile_selector,
    evaluation_budget,
)
from domain.allocator.device_stock import DeviceStock, InventoryStock
from domain.allocator.matching import match_devices
from domain.cluster.asks import class_selectors, find_class
from domain.cluster.state import ClusterState
from domain.inventory.devices import Inventory

__all__ = ["Limits", "SelectorMemoryLimit", "match_devices_within_limits", "run_bounded"]

T = TypeVar("T")

# What match_devices reads of a state: loaded before a fork, so that the child reads no database.
KINDS_READ = ("DeviceClass", "ResourceSlice", "ResourceClaim", "Node", "DeviceTaintRule")


class SelectorMemoryLimit(SelectorLimitExceeded):
    """A forked evaluation needed more memory than its limit."""


@dataclass(frozen=True)
class Limits:
    seconds: float = 2.0  # CPU time of CEL evaluation, summed over one request's evaluations
    memory_mb: int = 512  # what a forked evaluation may allocate beyond its parent's size
    wall_seconds: float = 10.0  # a forked evaluation's whole run, wall-clock (the gunicorn timeout is 60 s)
    in_process_cost: int = 1_000  # selectors estimated this cheap run in the request's process


def match_devices_within_limits(
    state: ClusterState,
    expression: str,
    class_name: str | None = None,
    limits: Limits | None = None,
    prepare_child: Callable[[], None] | None = None,
    stock: DeviceStock | None = None,
) -> dict[str, Any]:
    """``match_devices`` for a selector someone typed, within Kubernetes' cost limit and ``limits``.

    Raises SelectorCompileError (SelectorCostError over the cost limit), LookupError (no such
    class), and SelectorLimitExceeded. ``prepare_child`` runs first thing in a forked child.
    The devices come from ``stock`` when given, else from the state's ``Inventory``.
    """
    limits = limits or Limits()
    compiled = compile_selector(expression)
    compiled.require_within_cost_limit()
    worst = compiled.max_cost
    if class_name:
        for selector in class_selectors(find_class(state, class_name)):
            with contextlib.suppress(SelectorCompileError):  # else an error on every device, evaluated by no one
                worst = max(worst, compile_selector(selector).max_cost)
    if worst <= limits.in_process_cost:
        with evaluation_budget(limits.seconds):
            return match_devices(state, expression, class_name, stock)
    if stock is None:
        for kind in KINDS_READ:
            state.of_kind(kind)
        stock = InventoryStock(Inventory.of(state))  # built once here, kept with the state for the next request
    state.of_kind("DeviceClass")
    stock.preload()
    chosen = stock
    return run_bounded(lambda: match_devices(state, expression, class_name, chosen), limits, prepare_child)


# The child's evaluation clock, for the parent: CPU seconds its evaluations took, and the child's CPU
# time when the current one began (0 when none), which the parent compares with the child's CPU time
# in /proc.
_CLOCK = struct.Struct("dd")
_POLL_SECONDS = 0.02
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` (from /proc; 0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def run_bounded(fn: Callable[[], T], limits: Limits, prepare_child: Callable[[], None] | None = None) -> T:
    """``fn()`` in a forked child process, within ``limits``; its result or exception comes back
    pickled. The child must need nothing the fork does not copy (no database, no other thread)."""
    shared = mmap.mmap(-1, _CLOCK.size)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        _child(fn, limits, prepare_child, shared, read_end, write_end)
    os.close(write_end)
    try:
        payload = _watch(pid, read_end, shared, limits)
    finally:
        os.close(read_end)
        shared.close()
    outcome, value = payload
    if outcome == "ok":
        return value  # type: ignore[no-any-return]
    raise value


def _child(
    fn: Callable[[], Any],
    limits: Limits,
    prepare_child: Callable[[], None] | None,
    shared: mmap.mmap,
    read_end: int,
    write_end: int,
) -> None:  # pragma: no cover - runs in the child
    status = 0
    try:
        os.close(read_end)
        with contextlib.suppress(ValueError):  # forked from a thread other than the main one
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the server's handlers: the parent decides
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        if prepare_child is not None:
            prepare_child()
        _limit_memory(limits.memory_mb)
        try:
            with evaluation_budget(limits.seconds, shared):
                payload: tuple[str, Any] = ("ok", fn())
        except MemoryError:
            payload = ("error", _memory_limit(limits))
        except BaseException as e:  # noqa: BLE001 - every outcome goes back to the parent
            payload = ("error", e)
        try:
            data = pickle.dumps(payload)
        except Exception:  # noqa: BLE001 - an exception that does not pickle goes back as its message
            data = pickle.dumps(("error", RuntimeError(str(payload[1]))))
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view) :]
    except BaseException:  # noqa: BLE001
        status = 1
    finally:
        os._exit(status)


def _limit_memory(memory_mb: int) -> None:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[0])
    limit = pages * mmap.PAGESIZE + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _memory_limit(limits: Limits) -> SelectorMemoryLimit:
    return SelectorMemoryLimit(f"the selector needed more than {limits.memory_mb} MiB to evaluate")


def _watch(pid: int, read_end: int, shared: mmap.mmap, limits: Limits) -> tuple[str, Any]:
    """Read the child's answer, killing it when it goes past a limit."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + limits.wall_seconds
    stopped: SelectorLimitExceeded | None = None
    while True:
        ready, _, _ = select.select([read_end], [], [], _POLL_SECONDS)
        if ready:
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            continue
        now = time.monotonic()
        spent, started = _CLOCK.unpack_from(shared, 0)
        if started:
            spent += max(0.0, _cpu_seconds(pid) - started)
        if spent > limits.seconds:
            stopped = SelectorTimeLimit(f"the selector took more than {limits.seconds:g} s of CPU time to evaluate")
        elif now > deadline:
            stopped = SelectorTimeLimit(f"evaluating the selector took longer than {limits.wall_seconds:g} s")
        if stopped is not None:
            os.kill(pid, signal.SIGKILL)
            break
    _, status = os.waitpid(pid, 0)
    if stopped is not None:
        return "error", stopped
    if chunks:
        return pickle.loads(b"".join(chunks))  # noqa: S301 - our own child's answer
    if os.WIFSIGNALED(status):
        # Killed by the kernel or aborted by an allocation the address-space limit refused.
        return "error", _memory_limit(limits)
    return "error", RuntimeError(f"evaluating the selector failed (exit status {os.waitstatus_to_exitcode(status)})")
