"""The command line as a user runs it, on the bundled pair: real subprocesses for `lab`, `bench-app`,
`--help` and `--version`; `generate`, `train`, `card`, the chat drafter's commands' `--help` and the
bad-argument cases call `main` in this process (tests/commands.py; one bad argument still goes through
the real `python -m specdec generate`).

One exit-code policy for every subcommand: 0 on success; 2 and exactly ONE line
`specdec: error: ...` on stderr for bad arguments (argparse's and the library's ValueError alike).
"""

import re
import subprocess
import sys

import pytest
import torch

from commands import ENV, ROOT, command, in_process
from specdec import load_trace
from specdec.cli.main import COMMANDS, main
from specdec.explain.looks import LOOKS
from specdec.explain.speed import speedup
from specdec.trace.outcomes import Ending, Status
from specdec.trace.spine import Stats


def run(*args, timeout=120, env=ENV):
    return command(*args, timeout=timeout, env=env)


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdec: error:"), stderr
    return lines[0]


def text_block(stdout: str) -> str:
    """The marked text: between the legend's blank line and the statistics' blank line."""
    return stdout.split("\n\n")[1]


# ---------------------------------------------------------------- generate

@pytest.mark.slow
def test_generate_prints_marked_text_and_stats_and_writes_a_trace(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    out = tmp_path / "trace.json"
    r = in_process(capsys, "generate", "--prompt", "To be, or not to be", "--gamma", "4", "--max-new-tokens", "40",
                   "--seed", "0", "--json", str(out), "--compare-ar")
    assert r.returncode == 0, r.stderr
    assert "legend:" in r.stdout and "acceptance rate alpha" in r.stdout
    assert "tokens per target forward" in r.stdout and "speedup" in r.stdout
    gen = load_trace(out.read_text())
    assert len(gen.token_ids) == 40 and gen.settings.gamma == 4
    assert f"= {gen.stats.acceptance_rate:.3f}" in r.stdout
    assert "\033[" not in r.stdout     # NO_COLOR: symbols only
    text = text_block(r.stdout)
    assert text.startswith(gen.prompt)
    assert LOOKS[Status.ACCEPTED].symbol in text or gen.stats.accepted == 0
    if any(rd.n_accepted < rd.gamma for rd in gen.rounds):
        assert LOOKS[Status.REJECTED].symbol in text and LOOKS[Ending.RESIDUAL].symbol in text
    assert sum(text.count(look.symbol) for look in LOOKS.values()) >= len(gen.token_ids)   # every token marked
    # Every outcome in the text is explained by the legend, with the label the app uses.
    legend = r.stdout.splitlines()[1]
    for outcome, look in LOOKS.items():
        assert (look.symbol in text) == (f"{look.symbol} {look.label}" in legend), outcome
    # The speedup printed is speed.speedup (a ratio of token rates), up to the printed rounding.
    m = re.search(r"speculative (\d+) tokens in (\d+\.\d+) s, [\d.]+ ms a token; target alone (\d+) tokens in "
                  r"(\d+\.\d+) s, [\d.]+ ms a token .*speedup in tokens per second x(\d+\.\d+)", r.stdout)
    assert m, r.stdout
    assert int(m[1]) == int(m[3]) == len(gen.token_ids)   # both sides made the same number of tokens
    expected = speedup(Stats(new_tokens=int(m[1]), wall_seconds=float(m[2])),
                       Stats(new_tokens=int(m[3]), wall_seconds=float(m[4])))
    assert abs(float(m[5]) - expected) <= 0.01 + 0.01 * expected, (m[0], expected)
    # `replay` shows the exported run without a model: the same marked text and numbers
    again = in_process(capsys, "replay", str(out))
    assert again.returncode == 0, again.stderr
    assert text_block(again.stdout) == text
    shown = again.stdout.splitlines()
    assert shown[0].startswith("replayed from a trace (") and "gamma=4" in shown[0] and "seed=0" in shown[0]
    for line in r.stdout.splitlines():
        if line.startswith(("acceptance rate alpha", "tokens per target forward", "forward passes")):
            assert line in shown, line


@pytest.mark.slow
def test_colour_and_symbols_with_skip_adjustment(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")   # --color always wins over it
    r = in_process(capsys, "generate", "--prompt", "ROMEO.\n", "--max-new-tokens", "48", "--skip-adjustment",
                   "--color", "always", "--seed", "1")
    assert r.returncode == 0, r.stderr
    biased = LOOKS[Ending.BIASED_P]
    assert "SKIP ADJUSTMENT (biased)" in r.stdout
    assert re.search(rf"\033\[{re.escape(biased.ansi)}m[^\033]*{biased.symbol}\033\[0m", r.stdout), r.stdout


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
def test_bad_arguments_exit_2_with_one_line(args, words, capsys):
    # In this process (`main` returns the exit status the installed command exits with): each case
    # is about the message, and a subprocess would spend 3-4 s importing torch to say it. The one
    # below goes through the real command.
    assert main(args) == 2
    captured = capsys.readouterr()
    assert words in one_error_line(captured.err) and captured.out == ""


@pytest.mark.slow
def test_a_bad_argument_exits_the_command_with_status_2_and_one_line():
    r = run("generate", "--prompt", "x", "--gamma", "0")
    assert r.returncode == 2 and "gamma" in one_error_line(r.stderr) and r.stdout == ""


# ---------------------------------------------------------------- every other subcommand

@pytest.mark.parametrize("args, words", [
    (["bench", "--gammas", "0"], "gamma"),
    (["lab", "--samples", "0"], "samples"),
    (["bench-app", "--gamma", "99"], "gamma"),
    (["train", "--corpus-dir", "/no/such/folder"], "not a folder"),
    (["card", "--out", "/no/such/folder"], "specdec-target"),
    (["translate"], "invalid choice"),
    (["replay", "/no/such/trace.json"], "could not read the file"),
    (["replay", str(ROOT / "pyproject.toml")], "not a specdec trace"),
    ([], "required"),
])
def test_every_subcommand_reports_bad_arguments_in_one_line(args, words, capsys):
    assert main(args) == 2
    assert words in one_error_line(capsys.readouterr().err)


@pytest.mark.slow
def test_help_lists_every_subcommand():
    r = run("--help")
    assert r.returncode == 0 and r.stderr == ""
    for name in COMMANDS:
        assert name in r.stdout


@pytest.mark.slow
def test_lab_succeeds():
    r = run("lab", "--preset", "over-confident", "--samples", "20000", "--seed", "0")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^exact +\S+ +\S+ +\S+ +\S+ +not rejected$", r.stdout, re.M), r.stdout   # short rule names


@pytest.mark.slow
def test_bench_app_succeeds_with_exit_0():
    """It used to exit 1 after a successful run (its result dict went to sys.exit)."""
    r = run("bench-app", "--repeats", "1", "--max-new-tokens", "12", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "first round decoded" in r.stdout and "switch the step viewer" in r.stdout
    assert r.stderr == ""


@pytest.mark.slow
def test_train_then_card_succeed(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(12):
        (corpus / f"work{i:02d}.txt").write_text("ROMEO.\nBut soft, what light?\nJULIET.\nO Romeo.\n" * (5 + i))
    out = tmp_path / "models"
    r = in_process(capsys, "train", "--tiny", "--no-card", "--out", out, "--corpus-dir", corpus)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not (out / "specdec-target" / "README.md").exists()      # --no-card
    r = in_process(capsys, "card", "--quick", "--out", out)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "specdec-target" / "README.md").exists() and (out / "specdec-draft" / "README.md").exists()


# ---------------------------------------------------------------- the policy, in process (fast)

@pytest.mark.parametrize("argv, words", [
    (["lab", "--p", "0.5,0.5"], "both --p and --q"),
    (["lab", "--preset", "nope"], "invalid choice"),
    (["lab", "--p", "1,x", "--q", "1,1"], "comma-separated numbers"),
    (["lab", "--p", "1,1", "--q", "0,0"], "q has no mass"),
    (["lab", "--threads", "0"], "--threads"),
    (["lab", "--what"], "unrecognized arguments"),
    (["bench-app", "--repeats", "0"], "--repeats"),
    (["bench-app", "--prompt", " "], "empty"),
    (["bench-app", "--max-new-tokens", "0"], "max new tokens"),
    (["generate", "--prompt", "x", "--threads", "0"], "--threads"),
    (["generate", "--prompt", "x", "--seed", "-1"], "seed"),
    (["train", "--seed", "x"], "invalid int"),
    (["train", "--intermediate-size", "0"], "--intermediate-size"),
    (["train", "--intermediate-size", "wide"], "MLP width"),
    (["train", "--draft-vocab", "0"], "draft vocabulary size"),
    (["train", "--sharp", "0"], "above 0"),
    (["train", "--sharp", "1.5"], "sharp temperature"),
])
def test_bad_values_are_one_line_and_exit_2(argv, words, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert words in one_error_line(captured.err) and captured.out == ""


# ---------------------------------------------------------------- what a newcomer meets

def test_the_usage_line_names_the_program_as_it_was_run(monkeypatch, capsys):
    for argv0, prog in (("/venv/bin/specdec", "specdec"), ("/repo/specdec/__main__.py", "python -m specdec")):
        monkeypatch.setattr(sys, "argv", [argv0])
        with pytest.raises(SystemExit):
            main(["--help"])
        assert capsys.readouterr().out.startswith(f"usage: {prog} "), prog
        assert main(["lab", "--samples", "many"]) == 2
        assert f"(see {prog} lab --help)" in capsys.readouterr().err


def test_a_missing_model_folder_is_named_as_missing(capsys):
    assert main(["generate", "--prompt", "x", "--target", "/nonexistent", "--draft", "/nonexistent"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line == "specdec: error: /nonexistent: no such folder", line


def test_without_colour_rejected_drafts_are_struck_through_and_the_rest_is_the_text(bundled):
    """NO_COLOR or a pipe: every character of a rejected draft carries a combining stroke (so
    `be the✗,⚠` no longer reads as text), and what is left without struck characters and symbols is
    exactly the generated text. The legend's "(struck through)" is then true without colour too."""
    from specdec import RunSettings, speculative_generate
    from specdec.explain.terminal import STRIKE, legend, render_tokens
    from specdec.trace.outcomes import events

    gen = speculative_generate(bundled, "ROMEO.\n", RunSettings(gamma=4, max_new_tokens=48, seed=1))
    rejected = [ev for ev in events(gen) if ev.outcome is Status.REJECTED and ev.in_text]
    assert rejected, "the run should reject a draft"
    plain = render_tokens(gen, colour=False)
    assert "\033[" not in plain
    struck = re.findall(f"(?:.{STRIKE})+", plain)
    assert len(struck) == len(rejected)
    left = re.sub(f".{STRIKE}", "", plain)
    for look in LOOKS.values():
        left = left.replace(look.symbol, "")
    assert left == "".join(gen.token(t) for t in gen.token_ids)
    shown = legend(gen, colour=False)
    assert f"| {LOOKS[Status.REJECTED].symbol} rejected draft (struck through) |" in shown and STRIKE not in shown


def test_a_rejected_newline_breaks_no_line_in_colour_or_without(bundled):
    """Issue 38: a struck "↵" draft broke the line, so "To be, or not to be a man." read as three
    lines. A rejected draft is not part of the text: its newline shows as ↵ and the lines are the
    text's own (a negative control: an accepted newline still breaks its line)."""
    from specdec import RunSettings, speculative_generate
    from specdec.explain.terminal import mark, render_tokens

    for colour in (True, False):
        assert "\n" not in mark(Status.REJECTED, "\n", colour) and "↵" in mark(Status.REJECTED, "\n", colour)
        assert "\n" not in mark(Status.REJECTED, "a\nb", colour)
        assert mark(Status.ACCEPTED, "\n", colour).endswith("\n")   # the text's own newline stays
    gen = speculative_generate(bundled, "ROMEO.\n", RunSettings(gamma=4, max_new_tokens=48, seed=1))
    text = "".join(gen.token(t) for t in gen.token_ids)
    for colour in (True, False):
        assert render_tokens(gen, colour).count("\n") == text.count("\n")


@pytest.mark.parametrize("argv", [["lab", "--samples", "2000"],
                                  ["lab", "--p", "0.5,0.3,0.2", "--q", "0.2,0.3,0.5", "--tokens", "alpha,beta,gamma",
                                   "--samples", "2000"]])
def test_the_lab_fits_an_80_column_terminal(argv, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    for words in ("exact", "skip adjustment", "accept all", "greedy match", "not rejected", "after", "observed"):
        assert words in out, words


# ---------------------------------------------------------------- help, version, marks

def test_help_shows_every_default_and_version_answers():
    r = run("generate", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())   # argparse wraps lines
    # Sampling defaults to the preset's own: SmolLM2-135M-Instruct's authors' T 0.2, top-k 50, top-p 0.9.
    # γ too: the usual 4, or the one a pair's measured costs pick (test_gamma checks the words).
    for option, default in (("--gamma", "per pair; 4, smollm2-135m 2 on a CPU"), ("--max-new-tokens", 64),
                            ("--seed", 0),
                            ("--temperature", "per pair; 1, smollm2-135m 0.2"),
                            ("--top-k", "per pair; 0, smollm2-135m 50"),
                            ("--top-p", "per pair; 1, smollm2-135m 0.9"),
                            ("--drafter", "the draft model where the pair has one, else its features drafter, "
                                          "else n-gram")):
        assert re.search(rf"{option} \S+ .*?\(default: {re.escape(str(default))}\)", text), option
    r = run("--version")
    assert r.returncode == 0 and re.fullmatch(r"specdec \d+\.\d+\.\d+\n", r.stdout), r.stdout


def test_help_loads_no_torch():
    """`--help` answers from the table of commands: it imports none of their modules (so it takes
    about as long as Python's start, not torch's import)."""
    code = ("import sys\nfrom specdec.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('LOADED', sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
    assert "LOADED []" in r.stdout, r.stdout[-300:] + r.stderr


def test_a_newline_tokens_mark_ends_its_own_line():
    from specdec.explain.terminal import mark

    for colour in (False, True):
        shown = mark(Status.ACCEPTED, "\n", colour)
        assert shown.endswith("\n") and LOOKS[Status.ACCEPTED].symbol in shown.split("\n")[0]
        assert mark(Status.ACCEPTED, "a\n\n", colour).endswith("\n\n")


def test_the_bench_table_keeps_its_columns_with_a_long_contender_name():
    from specdec.bench.report import COLUMNS, format_table

    row = {"label": "specdec + draft model, no trace", "temperature": 0.0, "gamma": 3, "tok_s": 80.0,
           "tok_s_q1": 70.0, "tok_s_q3": 90.0, "target_forwards_per_token": 0.5, "alpha": 0.9, "c": 0.1,
           "verify_steps": 1.2, "speedup": 1.5, "leviathan": 2.0, "predicted": 1.8, "over_transformers": 1.1,
           "kind": "x"}
    lines = format_table([row, {**row, "label": "short"}]).splitlines()
    assert len({len(line) for line in lines if line and not line.startswith("-")}) == 1, lines
    assert len(COLUMNS) == len(lines[0].split())


# ---------------------------------------------------------------- the real model's chat drafter

# Each command with options and the defaults its script had (scripts/train_chat_gpu.py,
# chat_drafter_card.py, chat_alpha.py before they became commands): `--help` shows each.
CHAT_DRAFTER_DEFAULTS = {
    "chat-train": {"--device": "cuda", "--minutes": "3.0", "--steps": "100000", "--chunks": "(1, 4)",
                   "--batch": "1024", "--length": "160", "--batch-size": "64", "--unroll": "3",
                   "--intermediate": "1536", "--vocab": "8192", "--lr": "0.002", "--questions": "mixed",
                   "--out": "runs/chat-drafter"},
    "chat-card": {"--questions": "16", "--timed": "8"},
    "chat-alpha": {"--sets": "('card', 'other', 'own')", "--own": "12", "--tokens": "64", "--threads": "2"},
}


@pytest.mark.parametrize("name", CHAT_DRAFTER_DEFAULTS)
def test_each_chat_drafter_command_shows_its_options_and_their_defaults(name, capsys):
    with pytest.raises(SystemExit) as stop:   # argparse's --help exits 0 by itself
        main([name, "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0
    # One entry per option (argparse starts each on a line of its own, indented two spaces, and wraps it).
    entries = [" ".join(e.split()) for e in re.split(r"\n  (?=-)", out.split("\noptions:\n")[1])]
    entries = {e.split()[0]: e for e in entries if e}
    for option, default in CHAT_DRAFTER_DEFAULTS[name].items():
        assert entries[option].endswith(f"(default: {default})"), entries[option]


@pytest.mark.parametrize("args, words", [
    (["chat-train", "--batch", "0"], "--batch must be a whole number of at least 1"),
    (["chat-train", "--chunks", "1"], "expected 2 arguments"),
    (["chat-train", "--init-from", "/no/such/folder"], "not a folder"),
    (["chat-card", "--timed", "0"], "--timed must be a whole number of at least 1"),
    (["chat-card", "--questions", "many"], "invalid int"),
    (["chat-alpha", "--drafter", "/no/such/folder"], "not a folder"),
    (["chat-alpha", "--sets", "all"], "invalid choice"),
    (["chat-alpha", "--own", "0"], "--own must be a whole number of at least 1"),
    (["chat-alpha", "--seeds", "0", "-1"], "--seeds must be a whole number from 0 to 4,294,967,295, got -1"),
    (["chat-alpha", "--seeds", "2", "2"], "--seeds repeats a seed: 2 2"),
])
def test_each_chat_drafter_command_refuses_a_bad_argument_in_one_line(args, words, capsys):
    # Each is refused before any model loads (in this process: a subprocess adds only torch's import).
    assert main(args) == 2
    captured = capsys.readouterr()
    assert words in one_error_line(captured.err) and captured.out == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_chat_train_without_a_cuda_device_says_so_in_one_line(capsys):
    assert main(["chat-train"]) == 2
    assert "no CUDA device here" in one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------- the newcomer's edges

def test_generate_checks_the_json_path_before_it_decodes(tmp_path, monkeypatch, capsys):
    """A trace path that cannot be written is refused before any model loads, not after the run."""
    from specdec.models import pair

    def no_load(*args, **kwargs):
        raise AssertionError("the pair was loaded before the --json path was checked")
    monkeypatch.setattr(pair, "load_pair", no_load)
    for path, words in [(tmp_path / "no" / "t.json", "there is no folder"), (tmp_path, "it is a folder")]:
        assert main(["generate", "--prompt", "Hi", "--json", str(path)]) == 2
        assert words in one_error_line(capsys.readouterr().err)


def test_fetch_ends_with_the_command_the_readme_gives(monkeypatch, capsys, tmp_path):
    """The line `fetch` suggests is the README's own example of the real model (its default drafter)."""
    import shlex

    from specdec.models import realmodel

    monkeypatch.setattr(realmodel, "prepare", lambda *args, **kwargs: tmp_path)
    monkeypatch.setattr(sys, "argv", ["specdec"])
    assert main(["fetch", "smollm2-135m"]) == 0
    suggested = shlex.split(capsys.readouterr().out.splitlines()[-1])
    readme = (ROOT / "README.md").read_text(encoding="utf-8").replace("python -m specdec", "specdec")
    examples = [shlex.split(line.split("#")[0]) for line in readme.splitlines()
                if "generate --preset smollm2-135m" in line and line.lstrip().startswith("specdec")]
    assert examples and suggested in examples, (suggested, examples)
