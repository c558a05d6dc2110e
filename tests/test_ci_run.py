""".ci/run itself, run as written in a throwaway git repository, with `python` (and chromium,
apt-get) replaced by stand-ins on PATH: pytest's outcome is chosen, and a failing pytest must not
hide the clean-tree check. Nothing is installed and no real test runs."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# `python -m pytest` exits with $FAKE_PYTEST_EXIT and, when $FAKE_TOUCH names a file, writes it
# first (a test that writes into the clone); every other `python ...` (pip, ruff) succeeds.
FAKE_PYTHON = """#!/bin/sh
case "$*" in
  *"-m pytest"*)
    echo "fake pytest: exit $FAKE_PYTEST_EXIT"
    if [ -n "${FAKE_TOUCH:-}" ]; then echo changed > "$FAKE_TOUCH"; fi
    exit "$FAKE_PYTEST_EXIT";;
esac
exit 0
"""


def _stand_in(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def clone(tmp_path) -> Path:
    """A git repository holding .ci/run and one committed file, as a fresh clone would."""
    repo = tmp_path / "clone"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    (repo / "README.md").write_text("a clone\n")
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=repo, check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stand_in(bin_dir, "python", FAKE_PYTHON)
    _stand_in(bin_dir, "chromium", "#!/bin/sh\nexit 0\n")       # present: nothing to install
    _stand_in(bin_dir, "apt-get", "#!/bin/sh\necho 'apt-get must not run here' >&2\nexit 1\n")
    return repo


def run_ci(clone: Path, pytest_exit: int, touch: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{clone.parent / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "FAKE_PYTEST_EXIT": str(pytest_exit), "FAKE_TOUCH": str(clone / touch) if touch else ""}
    return subprocess.run(["bash", str(clone / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("pytest_exit", [1, 2, 5])
def test_a_failing_pytest_still_gets_the_clean_tree_report_and_fails_the_run(clone, pytest_exit):
    out = run_ci(clone, pytest_exit)
    assert "fake pytest" in out.stdout, out.stdout + out.stderr        # the script reached pytest
    assert "clean-tree check: the run left the clone as it found it" in out.stdout, out.stdout + out.stderr
    assert out.returncode != 0
    assert f"pytest (exit {pytest_exit}" in out.stderr, out.stderr
    if pytest_exit == 5:
        assert "no tests were collected" in out.stderr


def test_a_failing_pytest_that_changed_the_clone_gets_both_failures_named(clone):
    out = run_ci(clone, 1, touch="written-by-a-test.txt")
    assert out.returncode != 0
    assert "clean-tree check: FAILED" in out.stderr and "written-by-a-test.txt" in out.stderr, out.stderr
    assert "pytest (exit 1)" in out.stderr and "clean-tree check" in out.stderr.splitlines()[-1]


def test_a_passing_run_passes_and_a_changed_clone_alone_fails_it(clone):
    """The control: everything passing exits 0; a passing pytest that changed a file exits 1."""
    ok = run_ci(clone, 0)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "clean-tree check: the run left the clone as it found it" in ok.stdout
    changed = run_ci(clone, 0, touch="README.md")
    assert changed.returncode != 0 and "README.md" in changed.stderr, changed.stderr
    assert "pytest" not in changed.stderr.splitlines()[-1]
