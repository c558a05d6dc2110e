"""`specdec ARGS` as a test runs it: through the real command (`python -m specdec`, a subprocess), or
through `main`, the command's body, in the test's own process.

A subprocess first spends ~9 s of CPU importing torch and transformers (2 cores, measured), which
the test's process has done already; so a command whose process boundary adds nothing to what a
test checks runs in process. The boundary itself (the exit status, `__main__`) is tested through
real commands: tests/test_cli.py, and each file's first run of a subcommand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from specdec.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}


def command(*args, timeout: float = 600, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The real command, `python -m specdec ARGS`, offline, one thread, no colour."""
    return subprocess.run([sys.executable, "-m", "specdec", *args], cwd=cwd, env=env or ENV,
                          capture_output=True, text=True, timeout=timeout)


def in_process(capsys, *args) -> subprocess.CompletedProcess:
    """`main(ARGS)` here, reported as `command` reports a run: its exit status and what it printed
    (pytest's `capsys`). Set NO_COLOR with monkeypatch where the colour matters."""
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["specdec", *map(str, args)], code, captured.out, captured.err)
