"""The app's API, stated once: what a run asks for (`RunRequest`) and what each endpoint returns,
by name. No Gradio here: the load scripts and tests build requests with it too.

`RunRequest` is the Run button's inputs in order, with the app's defaults. The form's controls are
named by its fields, the examples are requests, a link is a request (`link_query`, `parse_link`),
and `python scripts/load.py` sends requests: change a field here and all of them follow.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import asdict, dataclass, fields, replace

from ...core.checks import number, whole_number
from ...core.checks import seed as seed_number
from ...core.sampling import Rule, SamplingConfig
from ...core.settings import RunSettings
from ...models.pair import BUNDLED, PRESETS, pair_sampling
from . import limits

DEFAULT_PROMPT = "To be, or not to be"
CHAT_PROMPT = "What is the capital of France?"   # an instruct model's first question (a user turn)


@dataclass(frozen=True)
class RunRequest:
    """One run as the form sends it (values as they come: text, numbers, anything), with the
    app's defaults. `checked()` turns it into what the decoder takes, or says what is wrong."""

    prompt: str = DEFAULT_PROMPT
    preset: str = BUNDLED
    drafter: str = "model"
    gamma: int = 4
    max_new_tokens: int = 64
    # None: the pair's own sampling (`Preset.sampling`: SmolLM2-135M-Instruct's authors' T = 0.2,
    # top-p 0.9; the bundled pair's T = 1, top-k 0, top-p 1). Any value given is kept as it is.
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    skip_adjustment: bool = False
    compare_ar: bool = False
    raw_text: bool = False   # an instruct model reads the prompt as raw text, not as a user turn
    fresh: bool = False      # decode it again though the cache holds it (the same tokens: a run is exact and seeded)

    @classmethod
    def names(cls) -> list[str]:
        """The fields in order: the form's controls, the API's inputs."""
        return [f.name for f in fields(cls)]

    def values(self) -> list:
        """The values in the API's order (what `gradio_client` passes to /generate), the sampling
        the request leaves unset filled in with its pair's (`resolved`)."""
        return list(asdict(self.resolved()).values())

    def resolved(self) -> RunRequest:
        """This request with each sampling value it leaves unset (None) taken from its pair's own
        (`models.pair_sampling`): a run of SmolLM2-135M-Instruct starts at its authors' sampling."""
        own = pair_sampling(self.preset) if isinstance(self.preset, str) else pair_sampling(BUNDLED)
        return replace(self, **{name: getattr(own, name) for name in ("temperature", "top_k", "top_p")
                                if getattr(self, name) is None})

    def with_(self, **changes) -> RunRequest:
        return replace(self, **changes)

    def checked(self) -> tuple[str, str, RunSettings]:
        """(prompt, preset key, settings) within this server's limits, or ValueError naming the
        control that is wrong (its label, as the page shows it)."""
        prompt = self.prompt
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("the prompt is empty: type at least one word")
        limits.check_prompt_chars(len(prompt))   # its tokens are counted once its pair is ready (`runs`)
        if self.preset not in PRESETS:
            raise ValueError(f"unknown model pair {self.preset!r}; choose one of: {', '.join(PRESETS)}")
        if any(getattr(self, name) is None for name in ("temperature", "top_k", "top_p")):
            return self.resolved().checked()
        settings = RunSettings(
            gamma=whole_number(self.gamma, "γ (drafts per round)", 1),
            max_new_tokens=whole_number(self.max_new_tokens, "max new tokens", 1),
            sampling=SamplingConfig(temperature=number(self.temperature, "temperature"),
                                    top_k=whole_number(self.top_k, "top-k", 0), top_p=number(self.top_p, "top-p")),
            seed=seed_number(self.seed),
            rule=Rule.SKIP_ADJUSTMENT if self.skip_adjustment else Rule.EXACT,
            drafter=self.drafter if isinstance(self.drafter, str) else repr(self.drafter),
            chat=False if self.raw_text is True else None)
        limits.check_run(settings.validate())
        return prompt, self.preset, settings


# The example prompts: each shows one thing (rejections, a greedy run, the n-gram drafter on
# repetitive text); the form fills the fields they name. The real model's run at its authors'
# sampling (its pair's own, left unset here): its answers read, so a student can judge a draft.
EXAMPLE_FIELDS = ("prompt", "preset", "drafter", "gamma", "temperature", "top_k", "top_p")
EXAMPLES = [request.resolved() for request in [
    RunRequest(),
    RunRequest(prompt="ROMEO:\nBut, soft! what light through yonder window breaks?", temperature=0.8),
    RunRequest(prompt="First Citizen:\nBefore we proceed any further, hear me speak.", gamma=8),
    RunRequest(prompt="To be, or not to be, that is the question. To be, or not to be, that is the question. "
                      "To be, or not to be,", drafter="ngram", gamma=6, temperature=0.0),
    RunRequest(prompt="the king, the king, the king, the king, the king, the king, the", drafter="ngram", gamma=8),
    RunRequest(prompt="HAMLET:\nWhat a piece of work is a man!", temperature=0.0),
    # The real model (SmolLM2-135M-Instruct): a question as a user turn under its chat template.
    RunRequest(prompt=CHAT_PROMPT, preset="smollm2-135m", drafter="features"),
    RunRequest(prompt="Write a short poem about the sea.", preset="smollm2-135m", drafter="ngram"),
]]


def default_prompt(preset: str) -> str:
    """The prompt a pair opens with: a question for a chat model, Shakespeare for the bundled pair."""
    return CHAT_PROMPT if preset != BUNDLED and PRESETS.get(preset) and PRESETS[preset].source else DEFAULT_PROMPT


# ---------------------------------------------------------------- a link to a step

# Query key -> RunRequest field. A run is deterministic for its settings and seed, so a link
# carries the request, not its results; `round` opens a round (1-based).
LINK_KEYS = {"prompt": "prompt", "pair": "preset", "drafter": "drafter", "gamma": "gamma", "n": "max_new_tokens",
             "t": "temperature", "top_k": "top_k", "top_p": "top_p", "seed": "seed", "skip": "skip_adjustment",
             "raw": "raw_text"}   # raw: only in a link that sets it (older links stay as they were)
_TEXT_FIELDS = ("prompt", "preset", "drafter")


def link_query(request: RunRequest, round_number=None, draft=None) -> str:
    """The query string that reproduces a run and opens a round, at a drafted position (`draft`,
    1-based) when given."""
    values = {key: getattr(request, name) for key, name in LINK_KEYS.items()}
    values.update(skip=int(bool(request.skip_adjustment)), raw=1 if request.raw_text is True else None,
                  round=round_number, draft=draft)
    return "?" + urllib.parse.urlencode({k: _plain(v) for k, v in values.items() if v is not None})


def _plain(v):
    return int(v) if isinstance(v, float) and v == int(v) else v


def parse_link(params) -> tuple[dict, int | None] | None:
    """The fields a link sets (by RunRequest field name) and the round to open, from a page's
    query parameters; None when the page was opened without a link. Bad values are left for
    `RunRequest.checked` to refuse with a message."""
    params = dict(params or {})
    if "prompt" not in params:
        return None
    found = {name: (params[key] if name in _TEXT_FIELDS else _number(params[key]))
             for key, name in LINK_KEYS.items() if key in params}
    found["skip_adjustment"] = str(params.get("skip", "0")) in ("1", "true", "True")
    found["raw_text"] = str(params.get("raw", "0")) in ("1", "true", "True")
    round_number = _number(params.get("round"))
    return found, int(round_number) if isinstance(round_number, (int, float)) else None


def linked_draft(params) -> int | None:
    """The drafted position a link opens (`draft`, 1-based), as a 0-based position; None without one."""
    draft = _number(dict(params or {}).get("draft"))
    return draft - 1 if isinstance(draft, int) and draft >= 1 else None


def _number(text):
    """A query value as a number when it is one (a whole number exactly, however long)."""
    try:
        return int(text)
    except (TypeError, ValueError):
        pass
    try:
        x = float(text)
    except (TypeError, ValueError):
        return text
    return int(x) if x.is_integer() else x


# ---------------------------------------------------------------- what the endpoints return

# Output names, in the order the API returns them (gradio_client gives a tuple in this order).
STEP_OUTPUTS = ["selection", "position", "pq_plot", "pq_table", "acc_plot", "acc_table", "end_plot",
                "end_table", "caption", "note"]
MAIN_OUTPUTS = ["status", "text", "plain_text", "timeline", "metrics", "run_state", "round_slider", "export_file",
                *STEP_OUTPUTS, "timeline_table", "time_plot", "title", "side_by_side", "speed_run", "sheet_file",
                "link_box", "next_outside_btn"]
STEP_VIEW_OUTPUTS = ["text", "timeline", "round_slider", *STEP_OUTPUTS]
STATES = ("run_state", "selection", "speed_run")   # per-visitor state: the API does not return these
BUTTONS = ("next_outside_btn",)   # shown or hidden by a run: Gradio's API leaves buttons out too


def api_outputs(names: list[str]) -> list[str]:
    """The names of what an API call returns, in order (the outputs less the states and buttons)."""
    return [n for n in names if n not in STATES + BUTTONS]
