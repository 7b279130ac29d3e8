"""The control plane's processes end with the process that started them, even when it is killed.

A killed test run or ``scripts/demo --kube`` runs no cleanup; before, its etcd and three components kept
running (and their ports and memory) until someone found them. Checked with a stand-in command: the
owner is a real Python process that spawns through ``spawn_tied`` and is then SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from demo.control_plane import SETPRIV

OWNER = """
import sys, time
from pathlib import Path
from demo.control_plane import spawn_tied
child = spawn_tied(["sleep", "300"], open(sys.argv[1], "wb"), Path(sys.argv[2]))
print(child.pid, flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has ended; only its parent (now init) has not reaped it yet


@pytest.mark.skipif(SETPRIV is None, reason="util-linux's setpriv is not installed")
def test_a_component_ends_when_its_owner_is_killed(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path / "child.log"), str(tmp_path)],
        stdout=subprocess.PIPE, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert owner.stdout is not None
    child = int(owner.stdout.readline())
    try:
        # setpriv sets the signal and then execs: once the PID runs the command, the signal is set.
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}/comm").read_text().strip() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert alive(child)
        # Its own session, like the components: a terminal's Ctrl-C to the owner's group does not reach it.
        assert os.getsid(child) == child
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), "the component outlived the process that started it"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
        owner.kill()
