"""The cyclic garbage collector: paused around bulk work, and run less often in every Claimline process."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from collector.gcpause import THRESHOLDS, gc_paused

ROOT = Path(__file__).resolve().parents[1]


def test_paused_then_restored() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_claimline_process_runs_it_less_often_once_django_starts() -> None:
    probe = "import gc, django; django.setup(); print(gc.get_threshold())"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "claimline.settings", "PATH": "/usr/bin:/bin", "DJANGO_DEBUG": "true"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == str(THRESHOLDS)
