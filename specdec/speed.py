"""Where a run's time went, and how fast speculative decoding should have been.

Pure arithmetic over `Stats` (no models, no timing of its own): the app explains a comparison
with it, the bench predicts speedups with it, the CLI prints them: one definition of each formula.

- tokens per round if every draft is accepted with probability alpha: (1 - alpha^(g+1)) / (1 - alpha)
  (Leviathan et al. 2023, eq. 1);
- Leviathan et al.'s speedup, which charges a verify as one target step and a draft step as c:
  tokens per round / (g c + 1);
- the speedup predicted from measured costs: tokens per round x (one target step) /
  (g x (one draft step) + (one verify)). The measured speedup falls short of it by the work
  outside the forwards (sampling, verify, bookkeeping, tracing).
"""

from __future__ import annotations

from dataclasses import dataclass

from .trace import Stats


def speedup(run: Stats, baseline: Stats) -> float:
    """How many times faster `run` made tokens than `baseline`: a ratio of token rates, so two
    runs that stopped at different lengths (EOS) still compare fairly. 0 when either is empty."""
    if not (run.wall_seconds and baseline.wall_seconds and run.new_tokens and baseline.new_tokens):
        return 0.0
    return (run.new_tokens / run.wall_seconds) / (baseline.new_tokens / baseline.wall_seconds)


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """(1 - alpha^(gamma+1)) / (1 - alpha): tokens per target forward if every position had alpha."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def leviathan_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al. (2023), eq. 1: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)), if every
    drafted position is accepted with probability alpha, a draft step costs c target steps and a
    verify costs one."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    return expected_tokens_per_round(alpha, gamma) / (gamma * c + 1)


def predicted_speedup(tokens_per_round: float, gamma: float, draft_step: float, verify: float,
                      target_step: float) -> float:
    """Speedup that the measured costs allow: tokens a round yields, times what one target step
    costs, over what a round costs (gamma draft steps and one verify). Any time unit."""
    cost = gamma * draft_step + verify
    return tokens_per_round * target_step / cost if cost > 0 else 0.0


@dataclass(frozen=True)
class TimeSplit:
    """A run's wall time in three parts (seconds)."""

    drafting: float   # the drafter's forwards and sampling
    target: float     # the target's forwards and the verify step (autoregressive: its steps)
    other: float      # everything else: recording the trace, emitting tokens, the loop itself

    @property
    def total(self) -> float:
        return self.drafting + self.target + self.other


def time_split(stats: Stats) -> TimeSplit:
    drafting, target = stats.draft_seconds, stats.verify_seconds
    return TimeSplit(drafting, target, max(0.0, stats.wall_seconds - drafting - target))


@dataclass(frozen=True)
class SpeedStory:
    """A speculative run measured against the target alone: the numbers and one sentence."""

    measured: float          # ratio of token rates (`speedup`)
    predicted: float         # from this run's own costs and alpha
    tokens_per_round: float  # expected from alpha
    gamma: float             # drafts per round, on average
    draft_steps: float       # one round's drafting, in target steps
    verify_steps: float      # one round's verify, in target steps
    other_share: float       # share of the speculative run's time outside the forwards
    sentence: str


def explain(spec: Stats, ar: Stats) -> SpeedStory:
    """Measured and predicted speedup of `spec` over `ar`, and which term made it fast or slow."""
    measured = speedup(spec, ar)
    rounds = max(spec.rounds, 1)
    gamma = spec.drafted / rounds
    step = ar.verify_seconds / ar.new_tokens if ar.new_tokens else 0.0   # one target step
    draft_step = spec.draft_seconds / spec.drafted if spec.drafted else 0.0
    verify = spec.verify_seconds / rounds
    tokens = expected_tokens_per_round(spec.acceptance_rate, round(gamma)) if spec.drafted else 1.0
    predicted = predicted_speedup(tokens, gamma, draft_step, verify, step)
    draft_steps = gamma * draft_step / step if step else 0.0
    verify_steps = verify / step if step else 0.0
    other_share = time_split(spec).other / spec.wall_seconds if spec.wall_seconds else 0.0
    cost = draft_steps + verify_steps
    head = (f"Each round cost {cost:.2f} target steps (drafting {draft_steps:.2f}, verifying {verify_steps:.2f}) "
            f"and, at α = {spec.acceptance_rate:.2f}, should yield {tokens:.2f} tokens: {predicted:.2f}× predicted.")
    if measured >= 1 and measured >= 0.9 * predicted:
        tail = " It won because the rounds yield more tokens than they cost."
    elif measured < 0.9 * predicted and other_share > 0.1:
        tail = (f" Work outside the forwards took {other_share:.0%} of the speculative run, so it reached "
                f"{measured:.2f}× rather than {predicted:.2f}×.")
    elif tokens <= cost:
        worst = "drafting" if draft_steps > verify_steps - 1 else "verifying"
        tail = (f" It lost because {worst} costs too much for the tokens a round yields: a cheaper draft "
                "(smaller c) or a higher α would help.")
    else:
        tail = " Run-to-run timing noise explains the rest (one run each)."
    return SpeedStory(measured, predicted, tokens, gamma, draft_steps, verify_steps, other_share, head + tail)
