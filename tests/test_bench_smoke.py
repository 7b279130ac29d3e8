"""Every script in bench/ still runs: each at a tiny size, as its own process, against throwaway databases.

Nothing else runs the benchmarks, so without this a renamed helper breaks one unnoticed
(``week_history.py`` did). The scripts run at once, in parallel (most of their time is
process start-up and waiting on child processes), on the test PostgreSQL server with every
database named ``<test database>_smoke…`` (``BENCH_DATABASE_PREFIX``), dropped afterwards,
and Redis at the test ``REDIS_URL``. Timings are printed by the scripts, never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"

# Each script at a tiny size, and a key of the figures it must print (in a JSON line).
SCRIPTS: dict[str, tuple[list[str], str]] = {
    "snapshot_cost.py": (["--nodes", "4", "--repeat", "1", "--typed-pages", "1"], "unchanged_vs_json_load"),
    "week_history.py": (["--nodes", "4", "--hours", "2"], "growth_bytes_per_day"),
    "views_bench.py": (["--nodes", "4", "8", "--hours", "2", "--iterations", "1", "--heavy-iterations", "1"],
                       "p50_ms"),
    "scale_out.py": (["--nodes", "4", "--repeat", "1"], "speedup"),
    "simulate_bench.py": (["--nodes", "4", "--claims", "3", "--repeat", "2"], "cpu_s"),
    "derived_cost.py": (["--nodes", "4", "--hours", "2", "--repeat", "1"], "seconds"),
    "review_cost.py": (["--nodes", "4", "--hours", "2", "--repeat", "1"], "layer_s"),
    "worker_memory.py": (["--nodes", "4", "--snapshots", "2"], "rss_mb"),
    "layer_storage.py": (["--nodes", "4", "--hours", "2"], "layer_vs_history"),
    "import_memory.py": (["--namespaces-mb", "0.05", "--pods-mb", "0.05"], "rss_vs_input"),
    # churning: both modes, the server's churn, latency, versions compared, derivation backlog
    "watch_cost.py": (["--nodes", "4", "--minutes", "0.3", "--interval", "2", "--churn", "60"], "watch_vs_poll_cpu"),
    "read_cost.py": (["--nodes", "4", "--hours", "2", "--repeat", "1"], "state_unmarked_slower"),
}
TIMEOUT_S = 240


def _server_and_prefix() -> tuple[str, str]:
    db = settings.DATABASES["default"]
    if "postgresql" not in db["ENGINE"]:
        pytest.skip("the benchmarks need PostgreSQL")
    user = quote(str(db.get("USER") or "postgres"))
    password = f":{quote(str(db['PASSWORD']))}" if db.get("PASSWORD") else ""
    server = f"postgres://{user}{password}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    return server, f"{db['NAME']}_smoke"


def _drop_databases(server: str, prefix: str) -> None:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (prefix + "%",))]
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Run:
    """A script running in the background, its output going to files (a full pipe would stall it)."""

    def __init__(self, script: str, args: list[str], env: dict[str, str], out_dir: Path) -> None:
        self.script, self.env = script, env
        self.stdout_path, self.stderr_path = out_dir / f"{script}.out", out_dir / f"{script}.err"
        with self.stdout_path.open("w") as out, self.stderr_path.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(BENCH / script), *args], cwd=ROOT, env=env, stdout=out, stderr=err
            )

    def finish(self) -> tuple[int, str, str]:
        try:
            returncode = self.proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"{self.script} did not finish in {TIMEOUT_S} s")
        return returncode, self.stdout_path.read_text(), self.stderr_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # scale_out.py stops its workers and servers on SIGTERM
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """Every script started at once; each test waits for its own."""
    server, prefix = _server_and_prefix()
    _drop_databases(server, prefix)
    env = {**os.environ, "BENCH_PG": server, "BENCH_DATABASE_PREFIX": prefix}
    out_dir = tmp_path_factory.mktemp("bench-smoke")
    started = {}
    for script, (args, _figure) in SCRIPTS.items():
        extra = ["--redis-url", settings.REDIS_URL] if script == "scale_out.py" else []
        started[script] = Run(script, [*args, *extra], env, out_dir)
    try:
        yield started
    finally:
        for run in started.values():
            run.stop()
        _drop_databases(server, prefix)


def _json_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_every_bench_script_has_a_smoke_run() -> None:
    scripts = {p.name for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(SCRIPTS), "give a new bench script a tiny size in SCRIPTS"


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_bench_script_runs_and_prints_its_figures(runs: dict[str, Run], script: str) -> None:
    returncode, stdout, stderr = runs[script].finish()
    assert returncode == 0, f"{script} exited {returncode}:\n{stderr[-4000:]}"
    figure = SCRIPTS[script][1]
    lines = _json_lines(stdout)
    assert any(figure in line for line in lines), f"{script} printed no {figure!r}:\n{stdout[-4000:]}"
    assert not any("timed_out_after_s" in line for line in lines)


def test_views_bench_prints_a_growth_row_for_every_endpoint(runs: dict[str, Run]) -> None:
    _, stdout, _ = runs["views_bench.py"].finish()
    measured = [line for line in _json_lines(stdout) if "endpoint" in line]
    endpoints = {line["endpoint"] for line in measured}
    assert {"audit (api)", "leaks (api)", "claims list", "inventory page", "device page", "metrics"} <= endpoints
    assert {line["nodes"] for line in measured} == {4, 8}
    table = [line for line in stdout.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| endpoint | 4 cold | 4 p50 | 4 p95 | 8 cold")
    assert len(table) == len(endpoints) + 1


def test_watch_cost_stores_the_same_versions_both_ways(runs: dict[str, Run]) -> None:
    returncode, stdout, stderr = runs["watch_cost.py"].finish()
    assert returncode == 0, stderr[-4000:]
    result = next(line for line in _json_lines(stdout) if "watch_vs_poll_cpu" in line)
    assert result["objects_changed_by_server"] > 0 and result["watch"]["versions"] > 0, result
    assert result["versions_identical"], result
    assert result["watch"]["latency"]["n"] > 0 and result["watch"]["backlog_at_end"] is not None


def test_watch_cost_with_a_worker_derives_what_the_watcher_stores(runs: dict[str, Run], tmp_path: Path) -> None:
    """``--worker``, the deployment's shape: the watcher only stores, a Celery worker of its own derives."""
    runs["watch_cost.py"].finish()  # the same databases: one run at a time
    env = {**os.environ, **runs["watch_cost.py"].env}
    args = ["--nodes", "4", "--minutes", "0.3", "--interval", "2", "--churn", "60", "--worker"]
    deployed = Run("watch_cost.py", [*args, "--worker-redis-dbs", "13", "14"], env, tmp_path)
    returncode, stdout, stderr = deployed.finish()
    assert returncode == 0, stderr[-4000:]
    result = next(line for line in _json_lines(stdout) if "watch_vs_poll_cpu" in line)
    assert result["versions_identical"] and result["watch"]["versions"] > 0, result
    assert result["watch_worker"]["derivations"] > 0 and result["watch_worker"]["cpu_s"] > 0, result
    assert result["watch"]["backlog_at_end"] is not None and result["poll"]["backlog_at_end"] is None, result


def test_derived_cost_derives_a_stored_history_again(runs: dict[str, Run], tmp_path: Path) -> None:
    """``--history``: the history derived_cost.py's own run built and derived, its newest change derived again."""
    returncode, _, stderr = runs["derived_cost.py"].finish()
    assert returncode == 0, stderr[-4000:]
    env = {**os.environ, **runs["derived_cost.py"].env}
    # --follow: then the next generation (a slice changed) and a quiet checkpoint, as a watch derives them.
    stdout, steps = _derived_again(env, tmp_path, "--follow", "1")
    assert "derive the newest churned snapshot again" in steps, stdout
    assert steps["churned snapshot (1 slices changed)"]["rendered"], stdout
    assert steps["quiet checkpoint"]["rendered"] == [], stdout  # every rendering stands for it
    stdout, steps = _derived_again(env, tmp_path, "--slice-change")
    assert "derive one slice change" in steps and steps["derive one slice change"]["pods_derived"] is not None, stdout
    stdout, steps = _derived_again(env, tmp_path, "--node-added")
    # Its allocations are pinned to their nodes by name: a node joining re-judges the waiting Pods only.
    assert "derive one node added" in steps and steps["derive one node added"]["pods_derived"] is not None, stdout


def _derived_again(env: dict[str, str], tmp_path: Path, *asked: str) -> tuple[str, dict[str, Any]]:
    """derived_cost.py ``--history`` over the history its smoke run built: its output, and its last line of each step."""
    run = Run("derived_cost.py", ["--history", "claimline_bench_derived_4", "--cluster", "bench", "--repeat", "1",
                                  *asked], env, tmp_path)
    returncode, stdout, stderr = run.finish()
    assert returncode == 0, stderr[-4000:]
    return stdout, {line.get("step"): line for line in _json_lines(stdout)}
