"""The settings of one run, typed and checked in one place.

`RunSettings` is what a run was asked to do: the decoder reads it, the trace stores it, the app,
the CLI and the bench build it. `validate` turns a bad value into a message that names the setting
(ValueError). How large a run may be is not the library's business: a server bounds what it accepts
where a request enters (`specdec.app.server.limits`), and a library caller asks for what they need.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from .checks import seed, whole_number
from .registry import MODEL, kind_of
from .sampling import Rule, SamplingConfig

SPECULATIVE = "speculative"
AUTOREGRESSIVE = "autoregressive"


@dataclass(frozen=True)
class RunSettings:
    mode: str = SPECULATIVE            # speculative | autoregressive (the target alone)
    gamma: int = 4                     # drafts per round (ignored when autoregressive)
    max_new_tokens: int = 64
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    rule: Rule = Rule.EXACT            # how drafts are verified (SKIP_ADJUSTMENT is the biased toggle)
    drafter: str = MODEL.name          # a name in `registry` (what each drafter is and needs)
    # How a text prompt is read: True, a user turn under the tokenizer's chat template (the assistant's
    # turn opened after it); False, raw text to continue; None, the pair's own way (a turn for a model
    # with a chat template). A run's trace records what was done (True or False).
    chat: bool | None = None

    @property
    def skip_adjustment(self) -> bool:
        return self.rule is Rule.SKIP_ADJUSTMENT

    @property
    def speculative(self) -> bool:
        return self.mode == SPECULATIVE

    def with_(self, **changes) -> RunSettings:
        return replace(self, **changes)

    def validate(self) -> RunSettings:
        """Raise ValueError with a message a user can act on; return self when all is well."""
        if self.mode not in (SPECULATIVE, AUTOREGRESSIVE):
            raise ValueError(f"unknown mode {self.mode!r}: choose {SPECULATIVE!r} or {AUTOREGRESSIVE!r}")
        whole_number(self.gamma, "gamma (drafts per round)", 1, strict=True)
        whole_number(self.max_new_tokens, "max new tokens", 1, strict=True)
        seed(self.seed, strict=True)
        kind_of(self.drafter)   # a registered drafter (`registry`), else a ValueError naming the choices
        if self.chat is not None and not isinstance(self.chat, bool):
            raise ValueError(f"chat must be true, false or unset, got {self.chat!r}")
        if not isinstance(self.rule, Rule):
            raise ValueError(f"unknown verify rule {self.rule!r}")
        self.sampling.validate()
        return self

    # -------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        d = asdict(self)
        d["rule"] = self.rule.value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunSettings:
        """Read the settings of a stored trace (also the dict that schema-1 traces carried)."""
        d = dict(d)
        rule = d.get("rule") or (Rule.SKIP_ADJUSTMENT.value if d.get("skip_adjustment") else Rule.EXACT.value)
        return cls(mode=d.get("mode", SPECULATIVE), gamma=d.get("gamma", 1), max_new_tokens=d.get("max_new_tokens", 1),
                   sampling=SamplingConfig(**d.get("sampling", {})),
                   seed=d.get("seed", 0), rule=Rule(rule), drafter=d.get("drafter", MODEL.name), chat=d.get("chat"))

