"""What happened to each token of a run, in one vocabulary, and the one walk every view shares.

A drafted token is accepted, rejected or unused (`Status`); a round's last token was drawn from
the residual, from p (biased), as the argmax of p, as a bonus, or by a plain target step
(`Ending`). `events(gen)` walks a trace in emission order and says, for every token, its
outcome and whether it is part of the text: the CLI, the app's text, the timeline and the tables
all read the run through it. How each outcome looks is `specdec.explain.looks`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from ..core.sampling import Rule


class Status(str, Enum):
    """What happened to one drafted token."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    UNUSED = "unused"      # drafted after the first rejection: never tested, thrown away


class Ending(str, Enum):
    """How a round's last token was produced."""

    RESIDUAL = "residual"  # first rejection: drawn from norm(max(0, p - q))
    BIASED_P = "biased_p"  # first rejection: drawn from p, the adjustment skipped (biased)
    GREEDY = "greedy"      # first rejection under greedy match: argmax p
    BONUS = "bonus"        # every draft accepted: drawn from p at position gamma + 1
    PLAIN = "plain"        # the round drafted nothing: one plain target step, drawn from p

    @classmethod
    def of(cls, drafted: int, rejected: bool, rule: Rule) -> Ending:
        if drafted == 0:
            return cls.PLAIN
        if not rejected:
            return cls.BONUS
        return {Rule.EXACT: cls.RESIDUAL, Rule.GREEDY_MATCH: cls.GREEDY}.get(rule, cls.BIASED_P)


Outcome = Status | Ending


def status_at(i: int, n_accepted: int) -> Status:
    """The status of draft i (0-based) in a round that accepted its first n_accepted drafts."""
    return Status.ACCEPTED if i < n_accepted else Status.REJECTED if i == n_accepted else Status.UNUSED


@dataclass(frozen=True)
class Event:
    """One token of a run as the views show it, in emission order."""

    outcome: Outcome
    token: int
    round: int
    position: int | None   # the drafted position, or None for the round's last token
    emitted: bool          # part of the generated text
    in_text: bool          # shown in the text: emitted, or the rejected draft where it was proposed


def events(gen) -> Iterator[Event]:
    """Every drafted token and every round's last token of a `trace.Generation`, round by round:
    the accepted drafts, the rejected one, the unused ones, then the token that ended the round. A
    round cut short (EOS among the accepted drafts, or max_new_tokens) emits fewer tokens than it
    decided."""
    for r in gen.rounds:
        n_emitted = len(r.emitted)
        end_emitted = n_emitted > r.n_accepted
        for i, pos in enumerate(r.positions):
            emitted = pos.status is Status.ACCEPTED and i < n_emitted
            shown = emitted or (pos.status is Status.REJECTED and end_emitted)
            yield Event(pos.status, pos.draft_token, r.index, i, emitted, shown)
        yield Event(r.ending, r.end_token, r.index, None, end_emitted, end_emitted)
