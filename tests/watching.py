"""Helpers to drive a ``Watcher`` against the fake API server from a test, step by step."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from collector.kube import api_client_for
from collector.sources import ClusterSource
from collector.watch import Watcher, WatchSettings
from demo.fake_apiserver import FakeApiServer


class Clock:
    """A clock the test moves: the watch stamps every arrival with it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_settings(**overrides: Any) -> WatchSettings:
    values: dict[str, Any] = {
        "timeout": 2.0, "request_timeout": 5.0, "page_size": 3, "backoff": 0.01, "max_backoff": 0.05,
        "checkpoint": 3600.0, "batch_seconds": 0.0,
    }
    values.update(overrides)
    return WatchSettings(**values)


def make_watcher(server: FakeApiServer, tmp: Path, clock: Clock, name: str = "watched", **overrides: Any) -> Watcher:
    path = tmp / f"kubeconfig-{name}"
    server.write_kubeconfig(path)
    api = api_client_for(ClusterSource(name, "kubeconfig", str(path)))
    return Watcher(name, api, f"test {name}", clock, test_settings(**overrides))


def settle(watcher: Watcher, server: FakeApiServer, timeout: float = 20.0) -> None:
    """Wait until every stream has seen the server's current resourceVersion, then apply what came."""
    target = int(server.cluster.resource_version)
    deadline = time.monotonic() + timeout
    while not watcher.caught_up(target):
        watcher.pump(0.02)
        if time.monotonic() > deadline:
            raise AssertionError(f"watch never caught up with {target}: failing {watcher.failing}")
    watcher.pump(0)


def wait_for(condition: Any, watcher: Watcher | None = None, timeout: float = 20.0, step: bool = False) -> None:
    """Pump (and with ``step``, let the watcher write what is due) until ``condition``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if watcher is not None:
            watcher.pump(0.02)
            if step:
                watcher.step()
        else:
            time.sleep(0.02)
        if time.monotonic() > deadline:
            raise AssertionError("timed out")


@contextmanager
def watching(server: FakeApiServer, tmp: Path, clock: Clock, name: str = "watched", **overrides: Any) -> Iterator[Watcher]:
    """A started watcher whose first batch (the cluster as listed) is stored; stopped afterwards."""
    watcher = make_watcher(server, tmp, clock, name, **overrides)
    watcher.start()
    try:
        settle(watcher, server)
        watcher.flush()
        yield watcher
    finally:
        watcher.stop()
