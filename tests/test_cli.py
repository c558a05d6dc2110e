"""The command line as a user runs it: a real subprocess on the bundled pair."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec import Generation

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}


def run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "specdec", *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def test_generate_prints_marked_text_and_stats_and_writes_a_trace(tmp_path):
    out = tmp_path / "trace.json"
    r = run("generate", "--prompt", "To be, or not to be", "--gamma", "4", "--max-new-tokens", "40",
            "--seed", "0", "--json", str(out), "--compare-ar")
    assert r.returncode == 0, r.stderr
    assert "legend:" in r.stdout and "acceptance rate alpha" in r.stdout
    assert "tokens per target forward" in r.stdout and "speedup" in r.stdout
    gen = Generation.from_json(out.read_text())
    assert len(gen.token_ids) == 40 and gen.settings["gamma"] == 4
    assert f"= {gen.stats.acceptance_rate:.3f}" in r.stdout
    assert "\033[" not in r.stdout     # NO_COLOR: symbols only
    if any(rd.n_accepted < rd.gamma for rd in gen.rounds):
        assert "✗" in r.stdout and "↻" in r.stdout


def test_colour_and_symbols_with_skip_adjustment():
    r = run("generate", "--prompt", "ROMEO.\n", "--max-new-tokens", "48", "--skip-adjustment",
            "--color", "always", "--seed", "1")
    assert r.returncode == 0, r.stderr
    assert "SKIP ADJUSTMENT (biased)" in r.stdout and "\033[35m!" in r.stdout


@pytest.mark.parametrize("args, words", [
    (["generate", "--prompt", "x", "--gamma", "0"], "gamma"),
    (["generate", "--prompt", "x", "--temperature", "-2"], "temperature"),
    (["generate", "--prompt", ""], "empty"),
    (["generate", "--prompt", "x", "--gamma", "four"], "invalid int"),
    (["generate", "--prompt", "x", "--drafter", "oracle"], "invalid choice"),
    (["generate", "--prompt", "x", "--preset", "nope"], "unknown model pair"),
    (["generate", "--prompt", "x", "--max-new-tokens", "100000"], "max new tokens"),
    (["generate"], "required"),
])
def test_bad_arguments_exit_2_with_one_line(args, words):
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdec: error:") and words in lines[0], r.stderr
