"""The README tells the truth about what a newcomer runs: its commands, options, symbols and times
are read here against the parser, the looks table, .ci/run and what the bundled pair recorded."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from specdec.cli.main import COMMANDS, build_parser
from specdec.core.sampling import Rule
from specdec.explain.looks import LOOKS
from specdec.models.pair import ASSETS
from specdec.trace.outcomes import Ending, Status

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    """A `## title` section of the README, up to the next `## ` heading."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def subparser(name: str):
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices[name]


def options(name: str) -> set[str]:
    return {s for a in subparser(name)._actions for s in a.option_strings if s.startswith("--")} - {"--help"}


def command_lines(text: str) -> list[list[str]]:
    """Each `specdec ...` or `python -m specdec ...` command in the text's bash blocks, as words
    (continuation lines joined, comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:3] == ["python", "-m", "specdec"]:
                words = words[2:]
            if words[:1] == ["specdec"] and len(words) > 1:
                commands.append(words[1:])
    return commands


def test_the_two_commands_come_right_after_the_introduction():
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[0] == "Two commands", headings
    assert README.index("## Two commands") < README.index("![")   # before any screenshot
    two = section("Two commands")
    assert "pip install -r requirements.txt && python app.py" in two and "bash .ci/run" in two


def test_the_readme_expands_ci_run_as_it_is():
    """Every command .ci/run runs after the chromium install is in the README's expansion, with
    the environment it sets (HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False)."""
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    two = section("Two commands")
    steps = [line.strip().replace("python -m pip", "pip").replace("python -m ruff", "ruff").replace(" -q -", " -")
             for line in run.splitlines() if line.strip().startswith(("python", "HF_HUB_OFFLINE"))]
    assert any("pytest" in s for s in steps) and any("ruff" in s for s in steps)
    for step in steps:
        assert step in two.replace(" && ", "\n"), step
    assert "git status" in two and "git status" in run


def test_every_option_the_command_line_section_names_exists():
    cli = section("The command line")
    commands = command_lines(cli)
    assert {words[0] for words in commands} == set(COMMANDS), "every subcommand is in the list"
    for words in commands:
        named = {w.strip("[]").split("=")[0] for w in words if w.strip("[").startswith("--")}
        assert named <= options(words[0]), (words[0], named - options(words[0]))


def test_the_generate_synopsis_names_every_option_of_generate():
    synopsis = next(words for words in command_lines(section("The command line")) if words[0] == "generate")
    named = {w.strip("[]").split("=")[0] for w in synopsis if w.strip("[").startswith("--")}
    assert named == options("generate"), options("generate") ^ named


def test_the_symbols_listed_for_generate_are_those_it_can_show():
    """generate runs the exact rule or, with --skip-adjustment, the biased one: its text can show
    the accepted and rejected drafts and every ending those two rules make, nothing else."""
    endings = {Ending.of(drafted, rejected, rule) for rule in (Rule.EXACT, Rule.SKIP_ADJUSTMENT)
               for drafted in (0, 1) for rejected in (False, True)}
    shown = {LOOKS[o].symbol for o in {Status.ACCEPTED, Status.REJECTED} | endings}
    cli = section("The command line")
    paragraph = cli[cli.index("`generate` marks every token"):]
    paragraph = " ".join(paragraph.split("\n\n")[0].split())
    listed = {s for s in re.findall(r"`(.)`", paragraph) if s in {look.symbol for look in LOOKS.values()}}
    assert listed == shown, (listed, shown)
    for symbol in listed:   # each with its label as the legend prints it
        look = next(look for look in LOOKS.values() if look.symbol == symbol)
        assert f"`{symbol}` {look.label.split(' (')[0]}" in paragraph, symbol


def recorded_training_minutes() -> float:
    """The whole recipe as the bundled pair's training.json files record it: the joint phase
    (both models) plus the draft's distillation."""
    target = json.loads((ASSETS / "specdec-target" / "training.json").read_text())
    draft = json.loads((ASSETS / "specdec-draft" / "training.json").read_text())
    distill = (draft.get("distill_history") or [{"seconds": 0}])[-1]["seconds"]
    return (target["train_seconds"] + distill) / 60


@pytest.mark.parametrize("where", ["README", "--help"])
def test_the_training_time_stated_is_the_one_recorded(where):
    if where == "README":
        text = next(line for line in section("The command line").splitlines() if re.match(r"specdec train +#", line))
    else:
        text = COMMANDS["train"][0]
    stated = float(re.search(r"about (\d+) min", text)[1])
    assert abs(stated - recorded_training_minutes()) <= 0.15 * recorded_training_minutes(), (stated, text)


def test_the_quick_bench_is_in_the_readme_as_a_smoke_run():
    line = next(line for line in section("The command line").splitlines() if "bench --quick" in line)
    assert "smoke run" in line
