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


def test_the_generate_synopsis_lists_the_choices_the_parser_offers():
    """Where the synopsis types an option's choices (`--drafter model|ngram|features`), they are the
    parser's, in its order (the drafters are the registry's: `specdec.core.registry`)."""
    synopsis = next(words for words in command_lines(CLI_DOC) if words[0] == "generate")
    actions = {s: a for a in subparser("generate")._actions for s in a.option_strings}
    checked = set()
    for option, value in zip(synopsis, synopsis[1:]):
        action = actions.get(option.strip("["))
        if action is not None and action.choices is not None and "|" in value:
            assert value.strip("[]").split("|") == list(action.choices), option
            checked.add(option.strip("["))
    assert "--drafter" in checked


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


# ---------------------------------------------------------------- pages that agree with each other and with the code

SPEED_PAGES = {"speed.md", "gpu.md"}   # the two pages that state measured speedups, each once


def test_the_docs_are_short_enough_to_read():
    counts = {name: words_shown(text) for name, text in DOCS.items()}
    assert all(n <= 1200 for n in counts.values()), counts
    assert sum(counts.values()) <= 6000, (sum(counts.values()), counts)


def test_no_page_keeps_a_run_by_run_history():
    """Today's figures in a table, once; the history is in git. No commit ids, no dated "Today"
    paragraphs, no history sections."""
    for name, text in DOCS.items():
        assert not re.search(r"\*\*Today\*\*|^#+ .*[Hh]istory", text, re.M), name
        commits = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"\d", w) and re.search("[a-f]", w)]
        assert not commits, (name, commits)


def test_speedups_are_stated_on_the_speed_pages_only():
    """The real pair's and the bundled pair's speedups live in docs/speed.md (and a GPU's in
    docs/gpu.md); every other page and the README link there instead of restating them."""
    for name, text in {"README.md": README, **DOCS}.items():
        figures = re.findall(r"\d+(?:\.\d+)?× ", text.replace("×)", "× ").replace("×,", "× "))
        assert not figures or name in SPEED_PAGES, (name, figures)
    for name in SPEED_PAGES:
        assert re.search(r"\d\.\d\d×", DOCS[name]), name
    for name in set(DOCS) - SPEED_PAGES - {"math.md", "cli.md", "api.md", "testing.md", "hosting.md"}:
        assert "speed.md" in DOCS[name] or "gpu.md" in DOCS[name], name


def test_the_alphas_models_md_gives_are_the_cards():
    card = json.loads((ASSETS / "specdec-features" / "measurements.json").read_text())["acceptance"]
    real = json.loads((ASSETS / "SmolLM2-135M-Instruct-features" / "measures.json").read_text())["measures"]
    alpha = {("bundled", r["drafter"], r["temperature"]): r["alpha"] for r in card}
    alpha |= {("smollm2-135m", "features", r["temperature"]): r["alpha"] for r in real["acceptance"]}
    rows = re.findall(r"^\| `([\w.-]+)` \| the (features drafter|draft model) \| ([\d.]+) \| ([\d.]+) \|",
                      DOCS["models.md"], re.M)
    assert len(rows) == 3, rows
    for pair, drafter, at_1, greedy in rows:
        kind = "features" if drafter.startswith("features") else "model"
        assert float(at_1) == round(alpha[pair, kind, 1.0], 3), (pair, drafter, at_1)
        assert float(greedy) == round(alpha[pair, kind, 0.0], 3), (pair, drafter, greedy)


def test_the_presets_models_md_lists_are_the_codes():
    from specdec.models.pair import PRESETS

    table = DOCS["models.md"].split("\n\n| preset |")[1].split("\n\n")[0]   # the page's first table
    rows = dict(re.findall(r"^\| `([\w.-]+)`(?: \(default\))? \| .* \| ([^|]+) \|$", table, re.M))
    assert set(rows) == set(PRESETS), set(rows) ^ set(PRESETS)
    for key, needs in rows.items():
        preset = PRESETS[key]
        if preset.source is not None:
            assert f"fetch {key}" in needs, key
        elif key != "bundled":
            assert "Hugging Face Hub" in needs, key


def test_every_preset_the_docs_name_exists():
    from specdec.models.pair import PRESETS

    for name, text in {"README.md": README, **DOCS}.items():
        text = "\n".join(line for line in text.splitlines() if " lab " not in line)   # the lab's presets are p and q
        named = re.findall(r"preset=\"([^\"]+)\"|--preset ([\w.-]+)", text)
        for key in {a or b for a, b in named}:
            assert key in PRESETS, (name, key)
        for key in re.findall(r"load_pair\(preset=\"([^\"]+)\"\)", text):   # an example runs offline
            assert not PRESETS[key].hub, (name, key)


def test_the_limits_hosting_md_lists_are_the_codes():
    """Every variable in hosting.md's table, with its default as limits.py reads it."""
    source = (ROOT / "specdec" / "app" / "server" / "limits.py").read_text(encoding="utf-8")
    defaults = {name: float(value.replace("_", "")) for name, value in
                re.findall(r'_read\("(SPECDEC_\w+)", ([\d_.]+)', source)}
    rows = re.findall(r"^\| (`SPECDEC_.*?) \| ([^|]+) \|", DOCS["hosting.md"], re.M)
    assert len(rows) >= 10, rows
    for names, values in rows:
        names, values = re.findall(r"`(SPECDEC_\w+)`", names), [v.strip() for v in values.split(",")]
        assert len(names) == len(values), (names, values)
        for name, value in zip(names, values, strict=True):
            assert name in defaults and float(value) == defaults[name], (name, value)


def test_every_environment_variable_the_docs_name_is_read_somewhere():
    code = "\n".join(p.read_text(encoding="utf-8") for folder in ("specdec", "tests", "scripts")
                     for p in (ROOT / folder).rglob("*.py")) + (ROOT / "app.py").read_text(encoding="utf-8")
    for name, text in {"README.md": README, **DOCS}.items():
        for variable in set(re.findall(r"\bSPECDEC_[A-Z_]+[A-Z]\b", text)):
            assert f'"{variable}"' in code, (name, variable)


def test_the_api_page_imports_what_specdec_has():
    import importlib

    block = re.search(r"```python\n(.*?)```", DOCS["api.md"], re.S)[1]
    for module, names in re.findall(r"^from (specdec[\w.]*) import (.+)$", block, re.M):
        imported = importlib.import_module(module)
        for attr in (n.strip() for n in names.split(",")):
            assert hasattr(imported, attr), (module, attr)


def test_the_quick_checks_time_is_one_figure_under_the_readmes_claim():
    """The README says "under two minutes"; docs/testing.md's table gives the measured seconds."""
    row = next(line for line in DOCS["testing.md"].splitlines() if line.startswith("| the quick check |"))
    time = row.split("|")[2]   # the time column: on 2 quiet cores
    seconds = [float(s) for s in re.findall(r"(\d+(?:\.\d+)?) s\b", time)]
    assert len(seconds) == 1 and seconds[0] < 120, row
