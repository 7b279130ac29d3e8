"""Shared plumbing for the benchmarks: databases, the fake API server as a process, child processes, machine facts."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
PG_BASE = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
# Set by the smoke test (tests/test_bench_smoke.py): every database a script makes is named with
# this prefix instead of ``claimline_bench``, so a run at a tiny size clobbers nothing of a real one.
DB_PREFIX = os.environ.get("BENCH_DATABASE_PREFIX", "")


def database_name(name: str) -> str:
    """The database a script's ``claimline_bench…`` name maps to (see ``DB_PREFIX``)."""
    if DB_PREFIX and name.startswith("claimline_bench"):
        return DB_PREFIX + name.removeprefix("claimline_bench")
    return name


def scratch_dir(prefix: str) -> Path:
    # Under var/ rather than /tmp: other jobs on a shared machine sweep /tmp.
    base = ROOT / "var" / "bench"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def recreate_database(name: str) -> str:
    import psycopg

    name = database_name(name)
    with psycopg.connect(f"{PG_BASE}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{PG_BASE}/{name}"


def database_exists(name: str) -> bool:
    import psycopg

    name = database_name(name)
    with psycopg.connect(f"{PG_BASE}/postgres", autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def database_url(name: str) -> str:
    return f"{PG_BASE}/{database_name(name)}"


def open_database(name: str, reuse: bool) -> None:
    """Django on the benchmark database ``name``: the one a previous run built (``--reuse``), else a new one."""
    if not reuse:
        setup_django(recreate_database(name))
        return
    if not database_exists(name):
        raise SystemExit(f"no database {name} to reuse: run without --reuse first")
    setup_django(database_url(name))


def setup_django(database_url: str, migrate: bool = True) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claimline.settings")
    os.environ.setdefault("CLAIMLINE_VAR_DIR", str(ROOT / "var" / "bench"))
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)


@dataclass
class ChildRun:
    wall_s: float
    cpu_s: float
    max_rss_mb: float
    returncode: int
    stdout: str
    stderr: str


def run_child(args: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> ChildRun:
    """Run a process to completion; wall time from fork to exit, and its own rusage."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return ChildRun(
            wall,
            usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024,
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )


class FakeServerProcess:
    """``python -m demo.fake_apiserver`` serving a scenario directory, in its own process.

    Its own process, so serving pages does not compete with the collector for the GIL:
    a real API server is another machine.
    """

    def __init__(self, scenario: Path, kubeconfig: Path, *extra: str) -> None:
        self.scenario, self.kubeconfig = scenario, kubeconfig
        self.extra = list(extra)  # more command-line options (e.g. --bookmark-interval)
        self.token = "bench-token"  # noqa: S105 - a loopback test server's token
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> str:
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "demo.fake_apiserver", "--scenario", str(self.scenario),
             "--kubeconfig", str(self.kubeconfig), "--token", self.token, *self.extra],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        assert self.proc.stdout is not None
        # It prints its URL once the stages are loaded, or exits.
        line = self.proc.stdout.readline().strip()
        if not line.startswith("http"):
            self.stop()
            raise RuntimeError(f"fake API server did not start (got {line!r})")
        self.url = line
        return line

    def control(self, path: str, body: bytes = b"{}") -> bytes:
        # Loopback URLs of the server we started: no scheme surprises.
        req = urllib.request.Request(f"{self.url}{path}", data=body, method="POST")  # noqa: S310
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
            return bytes(resp.read())

    def state(self) -> dict[str, Any]:
        """The server's /_fake/state: stage, resourceVersion, open watches, bytes sent so far."""
        import json

        with urllib.request.urlopen(f"{self.url}/_fake/state", timeout=60) as resp:  # noqa: S310
            return dict(json.loads(resp.read()))

    def warm(self) -> None:
        # The server serializes a stage's items on its first list: keep that out of the timings.
        for path in ("/api/v1/pods?limit=1", "/api/v1/events?limit=1"):
            auth = {"Authorization": f"Bearer {self.token}"}
            req = urllib.request.Request(f"{self.url}{path}", headers=auth)  # noqa: S310
            with urllib.request.urlopen(req, timeout=600):  # noqa: S310
                pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def machine() -> dict[str, object]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu": model,
        "python": platform.python_version(),
    }


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    s = sorted(values)
    if not s:
        return float("nan")
    rank = max(1, -(-len(s) * p // 100))
    return s[int(rank) - 1]


def stored_objects(items: list[dict[str, Any]]) -> list[Any]:
    """What a collection stores from a cluster's objects: the collector's own filters
    (Pods that use claims, Events about those Pods and claims), then its normalizer,
    in its kind order."""
    from collector.kinds import RESOURCE_TYPES
    from collector.normalize import normalize
    from collector.relevance import keep_relevant

    by_kind: dict[str, list[Any]] = {}
    for item in items:
        by_kind.setdefault(item["kind"], []).append(item)
    by_kind = keep_relevant(by_kind)
    return [normalize(rt.kind, obj, i) for rt in RESOURCE_TYPES for i, obj in enumerate(by_kind.get(rt.kind, []))]
