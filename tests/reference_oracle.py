"""Talks to the allocator oracle: Kubernetes' own DRA allocator behind a JSON Lines pipe.

``scripts/build-reference`` builds it from ``reference/allocator-oracle`` (see its README for the case and result
format). This module has no Django imports so that any test, benchmark or script can use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from demo.control_plane import cache_dir

#: Names an oracle binary to use instead of the one scripts/build-reference installed.
ORACLE_ENV = "CLAIMLINE_ALLOCATOR_ORACLE"


class OracleError(RuntimeError):
    """The oracle process failed, timed out or answered out of turn."""


def oracle_path() -> Path | None:
    """The oracle binary (``$CLAIMLINE_ALLOCATOR_ORACLE``, else the one built into the cache), or None if absent."""
    explicit = os.environ.get(ORACLE_ENV)
    path = Path(explicit) if explicit else cache_dir() / "bin" / "allocator-oracle"
    if path.is_file() and os.access(path, os.X_OK):
        return path
    return None


class AllocatorOracle:
    """One oracle process, started once; ``judge`` sends a case line and reads its result line.

    A timeout or a dead process leaves the line protocol out of step, so the process is then stopped and every
    later ``judge`` raises ``OracleError``.
    """

    def __init__(self, path: Path | str | None = None, timeout: float = 30.0) -> None:
        found = Path(path) if path is not None else oracle_path()
        if found is None:
            raise OracleError("allocator oracle not built: run scripts/build-reference")
        self.path = found
        self.timeout = timeout
        self._lock = threading.Lock()
        # Kept open for the process's lifetime and closed by close(), so no with-block.
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [str(self.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(self._process.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stdout: IO[bytes] | None) -> None:
        assert stdout is not None
        with stdout:
            for line in stdout:
                self._lines.put(line)
        self._lines.put(b"")  # EOF: the process is gone

    def judge(self, case: dict[str, Any]) -> dict[str, Any]:
        """Send one case and return the oracle's result for it (see the README for both shapes)."""
        line = json.dumps(case, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            process = self._process
            if process is None or process.stdin is None:
                raise OracleError("allocator oracle is closed")
            try:
                process.stdin.write(line)
                process.stdin.flush()
            except OSError as exc:
                raise self._fail(f"cannot write to the allocator oracle: {exc}") from exc
            try:
                answer = self._lines.get(timeout=self.timeout)
            except queue.Empty:
                raise self._fail(f"allocator oracle gave no answer within {self.timeout}s") from None
            if not answer:
                raise self._fail("allocator oracle exited")
        result: dict[str, Any] = json.loads(answer)
        name = case.get("name")
        if isinstance(name, str) and result.get("name") != name:
            raise OracleError(f"allocator oracle answered for case {result.get('name')!r}, expected {name!r}")
        return result

    def _fail(self, message: str) -> OracleError:
        self._stop(grace=0)
        self._stderr.seek(0)
        stderr = self._stderr.read().decode(errors="replace").strip()
        return OracleError(f"{message}: {stderr}" if stderr else message)

    def _stop(self, grace: float = 5.0) -> None:
        """End the process: close its stdin, which ends the oracle's loop, and kill it after ``grace`` seconds."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Stop the process (closing its stdin ends it). Safe to call more than once."""
        with self._lock:
            self._stop()
        self._reader.join(timeout=5)
        self._stderr.close()

    def __enter__(self) -> AllocatorOracle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
