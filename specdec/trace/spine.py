"""The trace of a generation: what every round drafted, tested, accepted and emitted.

The decoder writes it; charts, the UI, the CLI and the lab only read it. It stores sparse
distributions (the top tokens plus the rest of the vocabulary in two exact parts), so a trace is small
enough to export as JSON and replay later without any model. Data only: how it looks is
`specdec.explain.looks`, what its outcomes mean is `specdec.trace.outcomes`, and a trace from anyone is read
through `specdec.trace.validate.load_trace`, which checks it before building one.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from ..core.settings import RunSettings
from .outcomes import Ending, Status

SCHEMA = "specdec.trace"
SCHEMA_VERSION = 2   # the version written
VERSIONS = (1, 2)    # the versions read (`validate` checks them; schema 1: no tail split, `end_rule`)
TOP_N = 20   # tokens kept per distribution (the union of p's and q's top-N at a drafted position)


@dataclass
class Dist:
    """A distribution over the vocabulary kept sparse: probs of `ids`, plus `rest`, the exact
    remaining mass (summed in float64 over every other token), so ids + rest always add to the total.

    `split` cuts `rest` in two by the sign of p - q at the same position: [mass of the tail tokens
    with p >= q, mass of those with p < q] (p and q of one position share the cut). Within each
    part min(p, q) and max(0, p - q) are additive, so beta, TV and the residual mass computed on
    the stored view equal those on the full rows. One lumped rest would not keep them exact (min
    is not additive). None where no q exists (a bonus or plain step) or in a schema-1 trace.
    """

    ids: list[int]
    probs: list[float]
    rest: float
    split: list[float] | None = None

    def buckets(self) -> list[float]:
        """The tail as stored: [p >= q part, p < q part], or [rest] when there is no split."""
        return list(self.split) if self.split is not None else [self.rest]

    def prob(self, token: int) -> float | None:
        """Probability of `token`, or None when it is not among the kept ids."""
        try:
            return self.probs[self.ids.index(token)]
        except ValueError:
            return None


def keep_top(a: np.ndarray, b: np.ndarray, extra: np.ndarray, n: int = TOP_N
             ) -> tuple[list[tuple[list[int], list[float], list[float]]], np.ndarray]:
    """For each row: the ids to store (the top-n of `a` and of `b` among tokens with mass there,
    and the row's `extra` token), ordered by a then b (both descending, ties by id), with a's and
    b's values there; and a [R, V] mask of the stored ids.

    a, b: [R, V] float32 rows of one position (p and q, or the drawn distribution and p); extra:
    [R] ints. At temperature 0 or under top-k a row has fewer than n tokens worth showing, and
    no zero-probability token pads the view. All rows at once, in numpy: the decoder calls this
    every round, and numpy's per-call cost is a fraction of torch's.
    """
    rows, vocab = a.shape
    k = min(n, vocab)
    extra = np.asarray(extra, dtype=np.int64).reshape(-1, 1)
    tops = [np.argpartition(-x, k - 1, axis=1)[:, :k] if k < vocab else np.tile(np.arange(vocab), (rows, 1))
            for x in (a, b)]
    # A token is in a row's top only with mass there (a row with fewer than n positive entries
    # would otherwise add arbitrary zeros); `extra` is always kept.
    cand = np.concatenate([*tops, extra], axis=1)
    valid = np.concatenate([np.take_along_axis(a, tops[0], 1) > 0, np.take_along_axis(b, tops[1], 1) > 0,
                            np.ones_like(extra, dtype=bool)], axis=1)
    mask = np.zeros(a.shape, dtype=bool)
    np.put_along_axis(mask, np.where(valid, cand, extra), True, axis=1)   # only the stored ids (extra always is)
    return order_kept(cand, valid, [np.take_along_axis(a, cand, 1), np.take_along_axis(b, cand, 1)]), mask


def order_kept(cand: np.ndarray, valid: np.ndarray, values: list[np.ndarray]) -> list[tuple[list, ...]]:
    """Per row: the valid candidate ids without duplicates, ordered by values[0] then values[1]
    (both descending) then id, with every array of `values` ([R, C], at `cand`) there."""
    by_id = np.lexsort((~valid, cand), axis=1)                      # by id, a valid copy first
    cand, valid = np.take_along_axis(cand, by_id, 1), np.take_along_axis(valid, by_id, 1)
    values = [np.take_along_axis(x, by_id, 1) for x in values]
    drop = ~valid
    drop[:, 1:] |= cand[:, 1:] == cand[:, :-1]                      # duplicates
    order = np.lexsort((cand, -values[1], -values[0], drop), axis=1)   # kept first, by a, then b, then id
    counts = (~drop).sum(1).tolist()
    cols = [np.take_along_axis(x, order, 1).tolist() for x in (cand, *values)]
    return [tuple(col[r][:c] for col in cols) for r, c in enumerate(counts)]


def dist(ids: list[int], probs: list[float], total: float, split: tuple[float, float] | None = None) -> Dist:
    """A Dist from kept values: with `split` (the two tail parts, see `Dist`), rest is their sum;
    without, rest = the row's float64 total - fsum(kept)."""
    if split is not None:
        return Dist(ids=ids, probs=probs, rest=split[0] + split[1], split=[split[0], split[1]])
    return Dist(ids=ids, probs=probs, rest=max(0.0, total - math.fsum(probs)))


def tail_split(rows: list[np.ndarray], p: np.ndarray, q: np.ndarray, kept: np.ndarray
               ) -> list[list[tuple[float, float]]]:
    """For each array of `rows` ([R, V]), per row r: its mass over the tokens not kept (mask
    `kept`), split by the sign of p[r] - q[r]: (part where p >= q, part where p < q), in float64."""
    ge = (p >= q) & ~kept
    lt = (p < q) & ~kept
    return [list(zip((x * ge).sum(1, dtype=np.float64).tolist(), (x * lt).sum(1, dtype=np.float64).tolist()))
            for x in rows]


def beta_of(p: Dist, q: Dist) -> float:
    """beta = sum(min(p, q)) over the stored view of one position (exact with a split tail)."""
    return math.fsum(min(a, b) for a, b in zip(p.probs + p.buckets(), q.probs + q.buckets()))


def residual_mass_of(p: Dist, q: Dist) -> float:
    """sum(max(0, p - q)) over the stored view of one position (exact with a split tail)."""
    return math.fsum(max(0.0, a - b) for a, b in zip(p.probs + p.buckets(), q.probs + q.buckets()))


@dataclass
class Position:
    """One drafted position in a round."""

    draft_token: int
    p_draft: float      # p(x): target probability of the drafted token
    q_draft: float      # q(x): draft probability of the drafted token
    ratio: float        # p(x) / q(x)
    u: float            # the uniform draw it was tested against (drawn even if unused)
    status: Status
    beta: float         # sum(min(p, q)) over the whole vocabulary: expected acceptance here
    p: Dist             # p and q over the same ids: the union of their top-N
    q: Dist
    # TV distance between p and what the skip rule emits here, min(p, q) + (1 - beta) p: the
    # bias of skipping the adjustment at this position, on the full rows (the exact rule's is 0).
    # None in a schema-1 trace.
    skip_tv: float | None = None
    # p's mass where q is 0, on the full rows: tokens no draft can be, which only the residual gives
    # (outside a features drafter's vocabulary subset, or cut by top-k / top-p). None in older traces.
    p_where_q_is_0: float | None = None
    # p's mass outside a features drafter's vocabulary subset alone (no sampling cut in it): None
    # when q reads every id, or in older traces.
    p_outside_vocab: float | None = None
    # Which of the stored ids (p's and q's) lie outside that subset, in their stored order: the
    # step viewer marks and lists them. None when q reads every id, or in older traces.
    outside_ids: list[int] | None = None


@dataclass
class Round:
    """One draft / verify cycle."""

    index: int
    start: int                  # tokens generated before this round
    gamma: int                  # drafts proposed this round (may be < the setting near the end)
    positions: list[Position]
    n_accepted: int
    ending: Ending              # how the last token was produced
    end_token: int
    end_dist: Dist              # the distribution the end token was drawn from
    end_p: Dist                 # p at the end position (same ids as end_dist)
    end_q: Dist | None          # q at the end position (None when no draft was rejected)
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
    skip_tv_mean: float = 0.0             # mean skip_tv over tested positions (the run's bias if skipped)
    tokens_per_target_forward: float = 0.0
    target_forwards: int = 0
    draft_forwards: int = 0
    draft_seconds: float = 0.0            # in the drafter (its forwards and sampling)
    verify_seconds: float = 0.0           # in the target's forwards and the verify step
                                          # (autoregressive: in its target steps)
    wall_seconds: float = 0.0
    stopped: str = ""           # max_new_tokens | eos | stopped (asked to) | time limit


@dataclass
class Generation:
    prompt: str
    prompt_ids: list[int]
    token_ids: list[int]        # generated tokens only
    text: str                   # generated text only
    rounds: list[Round]
    stats: Stats
    settings: RunSettings
    models: dict                # target, draft, device, dtype
    token_text: dict[int, str] = field(default_factory=dict)   # id -> text, for every id in the trace
    eos_token_id: int | None = None
    title: str = ""                                             # a teacher's title for the run
    notes: dict[int, str] = field(default_factory=dict)         # round index -> a teacher's note

    # -------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        d = asdict(self)
        d["settings"] = self.settings.to_dict()
        d["token_text"] = {str(k): v for k, v in self.token_text.items()}
        d["notes"] = {str(k): v for k, v in self.notes.items()}
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, **d}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict) -> Generation:
        """Build a Generation from its dict. The dict is trusted: a trace from anyone goes through
        `validate.load_trace`, which checks it first and names the first thing wrong."""
        try:
            rounds = [_round_from_dict(r) for r in d["rounds"]]
            known = {f.name for f in fields(cls)}
            body = {k: v for k, v in d.items() if k in known}
            body.update(rounds=rounds, stats=Stats(**d["stats"]), settings=RunSettings.from_dict(d["settings"]),
                        token_text={int(k): v for k, v in d.get("token_text", {}).items()},
                        title=cap_text(d.get("title", ""), MAX_TITLE),
                        notes={int(k): cap_text(v, MAX_NOTE) for k, v in d.get("notes", {}).items()})
            return cls(**body)
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"malformed specdec trace: {err}") from None
        except ValueError as err:   # an unknown status, ending or rule names itself
            raise ValueError(f"malformed specdec trace: {err}") from None

    # -------------------------------------------------------------- helpers for readers
    def token(self, token_id: int) -> str:
        """A token's own text (as it appears in the output)."""
        return self.token_text.get(token_id, f"<{token_id}>")


MAX_TITLE, MAX_NOTE = 200, 2000   # characters kept of a trace's title and of each round's note


def cap_text(text, limit: int) -> str:
    """A note or title as stored: text only, at most `limit` characters (views escape it)."""
    if not isinstance(text, str):
        raise ValueError("a title or note must be text")
    return text[:limit]


# Schema 1 called the biased ending "target" and stored no ending for a round that drafted nothing.
_LEGACY_ENDINGS = {"target": Ending.BIASED_P.value}


def _round_from_dict(r: dict) -> Round:
    r = dict(r)
    ending = r.pop("ending", None) or _LEGACY_ENDINGS.get(r.get("end_rule"), r.get("end_rule"))
    r.pop("end_rule", None)
    if not r["positions"] and ending == Ending.BONUS.value:
        ending = Ending.PLAIN.value
    positions = [Position(**{**pos, "status": Status(pos["status"]), "p": Dist(**pos["p"]),
                             "q": Dist(**pos["q"])}) for pos in r["positions"]]
    return Round(**{**r, "positions": positions, "ending": Ending(ending), "end_dist": Dist(**r["end_dist"]),
                    "end_p": Dist(**r["end_p"]), "end_q": Dist(**r["end_q"]) if r.get("end_q") else None})


class Tally:
    """The run statistics, kept up to date one round at a time: adding a round costs its own
    positions, never a pass over the run (a streamed run asks for the stats after every round)."""

    def __init__(self):
        self.rounds = self.drafted = self.tested = self.accepted = 0
        self.beta_sum = self.skip_tv_sum = self.draft_seconds = self.verify_seconds = 0.0

    def add(self, r: Round) -> None:
        self.rounds += 1
        self.drafted += len(r.positions)
        self.draft_seconds += r.draft_seconds
        self.verify_seconds += r.verify_seconds
        for pos in r.positions:
            if pos.status is not Status.UNUSED:
                self.tested += 1
                self.accepted += pos.status is Status.ACCEPTED
                self.beta_sum += pos.beta
                self.skip_tv_sum += pos.skip_tv or 0.0

    def count(self, drafted: int, accepted: int, seconds: tuple[float, float]) -> None:
        """A round that was not recorded (a run with tracing off, for measuring what tracing
        costs): its counts and times only, no beta."""
        self.rounds += 1
        self.drafted += drafted
        self.tested += min(accepted + 1, drafted)
        self.accepted += accepted
        self.draft_seconds += seconds[0]
        self.verify_seconds += seconds[1]

    def stats(self, new_tokens: int, target_forwards: int, draft_forwards: int, wall_seconds: float,
              stopped: str) -> Stats:
        tested, drafted = self.tested, self.drafted
        return Stats(
            new_tokens=new_tokens, rounds=self.rounds, drafted=drafted, tested=tested, accepted=self.accepted,
            acceptance_rate=self.accepted / tested if tested else 0.0,
            accepted_per_drafted=self.accepted / drafted if drafted else 0.0,
            expected_acceptance=self.beta_sum / tested if tested else 0.0,
            skip_tv_mean=self.skip_tv_sum / tested if tested else 0.0,
            tokens_per_target_forward=new_tokens / target_forwards if target_forwards else 0.0,
            target_forwards=target_forwards, draft_forwards=draft_forwards,
            draft_seconds=self.draft_seconds, verify_seconds=self.verify_seconds,
            wall_seconds=wall_seconds, stopped=stopped)
