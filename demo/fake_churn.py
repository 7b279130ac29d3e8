"""A churn schedule the fake API server plays over time: objects changed in small steps, as clients
writing to a real API server change them, each change's time recorded (benchmarks measure how long
it takes to be stored).

A schedule is a JSON file ``{"steps": [{"at": S, "upserts": [obj, ...], "deletes": [[kind, ns, name],
...]}, ...]}``: step ``at`` seconds after the playing starts (``POST /_fake/churn {"file": path}``).
``GET /_fake/churn`` answers what was played: per change, its kind, UID, type, resourceVersion and
the wall-clock time (``time.time()``) it became visible to watches and lists.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Protocol

import orjson


class _Cluster(Protocol):
    def apply_objects(self, upserts: Any, deletes: Any) -> list[Any]: ...


class ChurnPlayer:
    def __init__(self, cluster: _Cluster, steps: list[dict[str, Any]]) -> None:
        self.cluster = cluster
        self.steps = sorted(steps, key=lambda step: float(step.get("at", 0)))
        self.applied = 0
        self.changes: list[tuple[str, str, str, int, float]] = []  # kind, uid, type, rv, when
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name="fake-churn", daemon=True)
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, cluster: _Cluster, path: str) -> ChurnPlayer:
        data = orjson.loads(Path(path).read_bytes())
        steps = data.get("steps") if isinstance(data, dict) else None
        if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
            raise ValueError('a churn schedule is {"steps": [{"at": seconds, "upserts": [...], "deletes": [...]}]}')
        return cls(cluster, steps)

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _play(self) -> None:
        for step in self.steps:
            delay = self._started + float(step.get("at", 0)) - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                return
            deletes = [tuple(d) for d in step.get("deletes") or [] if isinstance(d, list) and len(d) == 3]
            made = self.cluster.apply_objects(step.get("upserts") or [], deletes)
            when = time.time()
            with self._lock:
                self.applied += 1
                for change in made:
                    kind = change.new.obj.get("kind", "")
                    self.changes.append((kind, change.new.uid, change.type, change.rv, when))

    def report(self) -> dict[str, Any]:
        with self._lock:
            return {
                "steps": len(self.steps),
                "applied": self.applied,
                "changes": [list(c) for c in self.changes],
            }
