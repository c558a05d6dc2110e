"""The README and the pages in docs/ tell the truth about what a newcomer runs: their commands,
options, symbols, sizes and times are read here against the parser, the looks table, .ci/run, the
real model's pins and what the bundled pair recorded. The README is the front page (at most 1,500
words, as the project's hook counts them); the full command-line reference is docs/cli.md."""

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
DOCS = {path.name: path.read_text(encoding="utf-8") for path in sorted((ROOT / "docs").glob("*.md"))}
CLI_DOC = DOCS["cli.md"]   # "The command line", moved out of the README whole


def section(title: str, text: str = README) -> str:
    """A `## title` section of the README (or of `text`), up to the next `## ` heading."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def words_shown(markdown: str) -> int:
    """Words as the project's before-stop hook counts them: the front matter (a Space's
    configuration, between the first two `---` lines) left out."""
    lines = markdown.splitlines()
    if lines and lines[0].startswith("---"):
        lines = lines[lines.index("---", 1) + 1:]
    return len("\n".join(lines).split())


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

    def plain(line: str) -> str:   # pip and ruff as a user types them; pip's -q left out
        line = line.strip().replace("python -m pip", "pip").replace("python -m ruff", "ruff")
        return line.replace("install -q ", "install ")

    steps = [plain(line) for line in run.splitlines() if line.strip().startswith(("python", "HF_HUB_OFFLINE"))]
    assert any("pytest" in s for s in steps) and any("ruff" in s for s in steps)
    for text in (two, DOCS["testing.md"]):
        for step in steps:
            assert step in plain(text.replace(" && ", "\n")), step
        assert "git status" in text
    assert "git status" in run
    assert "HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False python -m pytest -q -n auto" in two


def test_every_option_the_command_line_section_names_exists():
    commands = command_lines(CLI_DOC)
    assert {words[0] for words in commands} == set(COMMANDS), "every subcommand is in the list"
    for words in commands + command_lines(README) + [c for doc in DOCS.values() for c in command_lines(doc)]:
        named = {w.strip("[]").split("=")[0] for w in words if w.strip("[").startswith("--")}
        assert words[0] in COMMANDS, words
        assert named <= options(words[0]), (words[0], named - options(words[0]))


def test_the_generate_synopsis_names_every_option_of_generate():
    synopsis = next(words for words in command_lines(CLI_DOC) if words[0] == "generate")
    named = {w.strip("[]").split("=")[0] for w in synopsis if w.strip("[").startswith("--")}
    assert named == options("generate"), options("generate") ^ named


def test_the_symbols_listed_for_generate_are_those_it_can_show():
    """generate runs the exact rule or, with --skip-adjustment, the biased one: its text can show
    the accepted and rejected drafts and every ending those two rules make, nothing else."""
    endings = {Ending.of(drafted, rejected, rule) for rule in (Rule.EXACT, Rule.SKIP_ADJUSTMENT)
               for drafted in (0, 1) for rejected in (False, True)}
    shown = {LOOKS[o].symbol for o in {Status.ACCEPTED, Status.REJECTED} | endings}
    cli = CLI_DOC
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


@pytest.mark.parametrize("where", ["docs/cli.md", "--help"])
def test_the_training_time_stated_is_the_one_recorded(where):
    if where == "docs/cli.md":
        text = next(line for line in CLI_DOC.splitlines() if re.match(r"specdec train +#", line))
    else:
        text = COMMANDS["train"][0]
    stated = float(re.search(r"about (\d+) min", text)[1])
    assert abs(stated - recorded_training_minutes()) <= 0.15 * recorded_training_minutes(), (stated, text)


def test_the_quick_bench_is_in_the_readme_as_a_smoke_run():
    for text in (section("The command line"), CLI_DOC):
        line = next(line for line in text.splitlines() if "bench --quick" in line)
        assert "smoke run" in line


# ---------------------------------------------------------------- the front page and its pages (issue 54)

def test_the_readme_is_a_front_page_that_reads_in_two_minutes():
    assert words_shown(README) <= 1500, words_shown(README)
    assert README.startswith("---\ntitle:") and "\napp_file: app.py\n" in README   # a Space reads its front matter
    assert "pytest" in README and "GRADIO_SERVER_PORT" in section("Two commands")
    assert "python -m venv .venv" in section("Two commands")


def test_every_link_from_the_readme_and_the_docs_leads_to_a_file():
    pages = {ROOT / "README.md": README, **{ROOT / "docs" / name: text for name, text in DOCS.items()}}
    for page, text in pages.items():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if not target.startswith(("http://", "https://")):
                assert (page.parent / target).exists(), (page.name, target)
    linked = set(re.findall(r"\]\(docs/([^)]+\.md)\)", README))
    assert linked == set(DOCS), set(DOCS) ^ linked   # every page of docs/ is reachable from the front page


def test_the_converted_real_model_has_one_size_everywhere():
    """The folder `specdec fetch smollm2-135m` writes, as the CLI's messages give it
    (`Source.folder_bytes`, checked against the real folder in test_realmodel.py): one figure."""
    from specdec.models.realmodel import MB, SMOLLM2_135M

    said = [int(n) for text in (README, *DOCS.values())
            for n in re.findall(r"(\d+) MB (?:float32 )?(?:model )?folder", text)]
    assert said and set(said) == {round(SMOLLM2_135M.folder_bytes / MB)}, said


def test_the_two_smollm2_presets_are_told_apart():
    real = section("The real model")
    assert "**`smollm2-135m`**" in real and "**`smollm2`**" in real
    assert "offline" in real[real.index("`smollm2-135m`"):real.index("**`smollm2`**")]
    assert "Hugging Face Hub" in real[real.index("**`smollm2`**"):]


# ---------------------------------------------------------------- the quick check and the front page

QUICK = '-m "not slow and not browser"'


def test_the_readme_gives_the_quick_check_as_pytest_ini_names_it():
    """pytest.ini says the fast subset is in the README: its command is there, offline, with its time
    (under two minutes on 2 cores: the figure docs/testing.md's table gives, timed)."""
    assert QUICK in (ROOT / "pytest.ini").read_text(encoding="utf-8")
    two = section("Two commands")
    line = next(line for line in two.splitlines() if QUICK in line)
    assert line.startswith("HF_HUB_OFFLINE=1 python -m pytest") and "under two minutes" in " ".join(two.split())
    assert QUICK in DOCS["testing.md"][:1500]   # the testing page opens with it too


def test_the_readme_is_a_front_page_without_measurements():
    """One-line claims only: no dated run, no seconds, gigabytes or speedups (they live in docs/,
    once, with the command that measures them). The real model's sizes are its pins, checked above."""
    body = README.split("\n---\n", 1)[1]
    for pattern in [r"\b20\d\d-\d\d-\d\d\b", r"\d+(\.\d+)? ?s\b", r"\d+(\.\d+)? ?GB\b", r"\d+(\.\d+)?×",
                    r"\d+(\.\d+)? tok/s"]:
        assert not re.search(pattern, body), (pattern, re.search(pattern, body)[0])
