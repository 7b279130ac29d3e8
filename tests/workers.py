"""A real Celery worker as a child process, against the test database and Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def worker_env(**extra: str) -> dict[str, str]:
    db = connection.settings_dict
    return {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        **extra,
    }


@contextmanager
def celery_worker(env: dict[str, str], *args: str) -> Iterator[subprocess.Popen[str]]:
    """``celery -A claimline worker --pool solo`` plus ``args``; stopped (SIGTERM, then kill) on exit."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "claimline", "worker", "--pool", "solo", "--loglevel", "INFO", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        yield worker
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
