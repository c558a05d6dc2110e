"""The trace of a generation: what every round drafted, tested, accepted and emitted.

The decoder writes it; charts, the UI, the CLI and the lab only read it. It stores sparse
distributions (the top tokens plus the exact mass of everything else), so a trace is small
enough to export as JSON and replay later without any model.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields

import torch

SCHEMA = "specdec.trace"
SCHEMA_VERSION = 1
TOP_N = 20   # tokens kept per distribution (the union of p's and q's top-N at a drafted position)

# Status of a drafted position.
ACCEPTED = "accepted"
REJECTED = "rejected"
UNUSED = "unused"      # drafted after the first rejection: never tested, thrown away


@dataclass
class Dist:
    """A distribution over the vocabulary kept sparse: probs of `ids`, plus `rest`, the exact
    remaining mass (summed in float64 over every other token), so ids + rest always add to the total."""

    ids: list[int]
    probs: list[float]
    rest: float

    def prob(self, token: int) -> float | None:
        """Probability of `token`, or None when it is not among the kept ids."""
        try:
            return self.probs[self.ids.index(token)]
        except ValueError:
            return None


def sparse(dist: torch.Tensor, ids=None, n: int = TOP_N) -> Dist:
    """Keep `ids` (default: the top-n of `dist`) and the exact mass of the rest.

    rest = (float64 sum of the whole row) - (exact sum of the kept values, math.fsum): the mass
    outside the kept ids up to float64 rounding, without materialising a mask over the vocabulary.
    """
    dist = dist.detach().float().cpu()
    if ids is None:
        ids = torch.topk(dist, min(n, dist.numel())).indices
    ids = [int(i) for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids)]
    probs = dist[ids].tolist()
    return Dist(ids=ids, probs=probs, rest=max(0.0, float(dist.double().sum()) - math.fsum(probs)))


def union_top(p: torch.Tensor, q: torch.Tensor, n: int = TOP_N, also=()) -> list[int]:
    """Ids of the top-n of p and of q (plus `also`, e.g. the drafted token), ordered by p then q,
    for a side-by-side p/q view."""
    k = min(n, p.numel())
    ids = sorted(set(torch.topk(p, k).indices.tolist()) | set(torch.topk(q, k).indices.tolist()) | set(also))
    pv, qv = p[ids].tolist(), q[ids].tolist()
    return [i for _, _, i in sorted(zip(pv, qv, ids), key=lambda t: (-t[0], -t[1]))]


@dataclass
class Position:
    """One drafted position in a round."""

    draft_token: int
    p_draft: float      # p(x): target probability of the drafted token
    q_draft: float      # q(x): draft probability of the drafted token
    ratio: float        # p(x) / q(x)
    u: float            # the uniform draw it was tested against (drawn even if unused)
    status: str         # accepted | rejected | unused
    beta: float         # sum(min(p, q)) over the whole vocabulary: expected acceptance here
    p: Dist             # p and q over the same ids: the union of their top-N
    q: Dist


@dataclass
class Round:
    """One draft / verify cycle."""

    index: int
    start: int                  # tokens generated before this round
    gamma: int                  # drafts proposed this round (may be < the setting near the end)
    positions: list[Position]
    n_accepted: int
    end_rule: str               # residual | target | greedy | bonus (see sampling.END_*)
    end_token: int
    end_dist: Dist              # the distribution the end token was drawn from
    end_p: Dist                 # p at the end position (same ids as end_dist)
    end_q: Dist | None          # q at the end position (None for a bonus token)
    residual_mass: float | None  # sum(max(0, p - q)) at the rejected position, before normalising
    emitted: list[int]          # tokens this round added to the output (cut at EOS / max_new_tokens)
    draft_seconds: float
    verify_seconds: float


@dataclass
class Stats:
    new_tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    tested: int = 0             # drafts tested: each round up to and including its first rejection
    accepted: int = 0
    acceptance_rate: float = 0.0          # alpha = accepted / tested (per-position acceptance probability)
    accepted_per_drafted: float = 0.0     # accepted / drafted (what romsto calls its acceptance rate)
    expected_acceptance: float = 0.0      # mean beta over tested positions
    tokens_per_target_forward: float = 0.0
    target_forwards: int = 0
    draft_forwards: int = 0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    wall_seconds: float = 0.0
    stopped: str = ""           # max_new_tokens | eos


@dataclass
class Generation:
    prompt: str
    prompt_ids: list[int]
    token_ids: list[int]        # generated tokens only
    text: str                   # generated text only
    rounds: list[Round]
    stats: Stats
    settings: dict              # gamma, max_new_tokens, sampling, seed, skip_adjustment, drafter, mode
    models: dict                # target, draft, device, dtype
    token_text: dict[int, str] = field(default_factory=dict)   # id -> text, for every id in the trace
    eos_token_id: int | None = None

    # -------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        d = asdict(self)
        d["token_text"] = {str(k): v for k, v in self.token_text.items()}
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, **d}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Generation":
        if d.get("schema") != SCHEMA:
            raise ValueError("not a specdec trace (missing schema 'specdec.trace')")
        if d.get("version") != SCHEMA_VERSION:
            raise ValueError(f"trace schema version {d.get('version')} is not supported "
                             f"(this specdec reads version {SCHEMA_VERSION})")
        try:
            rounds = []
            for r in d["rounds"]:
                positions = [Position(**{**pos, "p": Dist(**pos["p"]), "q": Dist(**pos["q"])})
                             for pos in r["positions"]]
                rounds.append(Round(**{
                    **r, "positions": positions, "end_dist": Dist(**r["end_dist"]),
                    "end_p": Dist(**r["end_p"]),
                    "end_q": Dist(**r["end_q"]) if r.get("end_q") else None}))
            known = {f.name for f in fields(cls)}
            body = {k: v for k, v in d.items() if k in known}
            body.update(rounds=rounds, stats=Stats(**d["stats"]),
                        token_text={int(k): v for k, v in d.get("token_text", {}).items()})
            return cls(**body)
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed specdec trace: {err}") from None

    @classmethod
    def from_json(cls, text: str) -> "Generation":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise ValueError("not a specdec trace (expected a JSON object)")
        return cls.from_dict(data)

    # -------------------------------------------------------------- helpers for readers
    def token(self, token_id: int) -> str:
        return self.token_text.get(token_id, f"<{token_id}>")


def summarize(rounds: list[Round], new_tokens: int, target_forwards: int, draft_forwards: int,
              wall_seconds: float, stopped: str) -> Stats:
    """The run statistics, all derived from the rounds (so an imported trace can be checked)."""
    tested = [pos for r in rounds for pos in r.positions if pos.status != UNUSED]
    accepted = sum(pos.status == ACCEPTED for pos in tested)
    drafted = sum(len(r.positions) for r in rounds)
    return Stats(
        new_tokens=new_tokens, rounds=len(rounds), drafted=drafted, tested=len(tested),
        accepted=accepted,
        acceptance_rate=accepted / len(tested) if tested else 0.0,
        accepted_per_drafted=accepted / drafted if drafted else 0.0,
        expected_acceptance=sum(pos.beta for pos in tested) / len(tested) if tested else 0.0,
        tokens_per_target_forward=new_tokens / target_forwards if target_forwards else 0.0,
        target_forwards=target_forwards, draft_forwards=draft_forwards,
        draft_seconds=sum(r.draft_seconds for r in rounds),
        verify_seconds=sum(r.verify_seconds for r in rounds),
        wall_seconds=wall_seconds, stopped=stopped)


def visible_token(text: str) -> str:
    """A token's text with spaces, newlines and tabs made visible (for labels and tables)."""
    shown = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
    return shown or "∅"


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """(1 - alpha^(gamma+1)) / (1 - alpha): tokens per target forward if every position had alpha."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)
