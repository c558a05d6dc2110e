"""The step viewer's sentences about one drafted position: the bias of this run's rule there, and
the p-mass no draft can be (outside a drafter's vocabulary, or cut by sampling), with what gives it."""

from __future__ import annotations

from ...explain.looks import prob_text
from ...explain.taken import lab_skip_tv
from ...trace.outcomes import Status
from ...trace.spine import Generation

NO_BIAS = 5e-5   # a TV below this prints as 0.0000: no bias at this position to speak of


def bias_note(gen: Generation, pos) -> str:
    """The bias of this run's rule at one position (closed form, from the trace), in words."""
    if pos.status is Status.UNUSED:
        return ("This draft emitted nothing (it was thrown away untested), so there is no output here to "
                "compare with p: the round's next token came from the rejected position.")
    if pos.skip_tv is None:
        return "Bias at this position: not stored (a schema-1 trace)."
    if gen.settings.skip_adjustment and pos.skip_tv < NO_BIAS:
        return (f"Output here vs p: TV = {prob_text(pos.skip_tv)}: skipping the adjustment happened to cost nothing "
                "at this position, because min(p, q) + (1 − β) p is p itself here (as it is wherever p is one-hot, "
                "q equals p, or they share no token); the run is still biased at its other positions.")
    if gen.settings.skip_adjustment:
        return (f"Output here vs p: TV = {prob_text(pos.skip_tv)}, biased, because the adjustment was skipped "
                "(closed form: min(p, q) + (1 − β) p)." + lab_figure(gen, pos))
    return (f"Output here vs p: TV = 0 (the exact rule's output is p; closed form). Had the adjustment been "
            f"skipped: TV = {pos.skip_tv:.4f}." + lab_figure(gen, pos))


def lab_figure(gen: Generation, pos) -> str:
    """Beside the skip rule's TV over the full vocabulary, the exactness lab's figure for the same
    position where the two differ at four decimals, and why ('' where they agree)."""
    place = next(((r, i) for r, rnd in enumerate(gen.rounds) for i, x in enumerate(rnd.positions) if x is pos), None)
    lumped = None if place is None else lab_skip_tv(gen, *place)
    if lumped is None or f"{lumped:.4f}" == f"{pos.skip_tv:.4f}":
        return ""
    return (f" That is over the full vocabulary; the exactness lab shows {lumped:.4f}: it lumps the rest of the "
            "vocabulary into two rows, inside which |min(p, q) − β p| changes sign and partly cancels.")


def unreachable_note(gen: Generation, pos) -> str:
    """The p-mass no draft can be at one position, in words, for a drafter whose q reads a vocabulary
    subset: p's mass outside that vocabulary (`p_outside_vocab`), and, when sampling cut q too, all
    of p where q is 0; and what gives those tokens under this run's rule. Empty where the trace does
    not store it or the run's drafter has no subset."""
    vocab, outside, mass = gen.models.get("draft_vocab"), pos.p_outside_vocab, pos.p_where_q_is_0
    if not vocab or (outside is None and mass is None):
        return ""
    total = gen.models.get("vocab_size")
    holds = f"{vocab:,} of the {total:,} token ids" if total else f"{vocab:,} token ids"
    sampling = gen.settings.sampling
    cut = ("at temperature 0 q is one-hot on the drafted token: 0 on every other id" if sampling.greedy else
           "top-k / top-p set q to 0 on more ids" if sampling.top_k or sampling.top_p < 1 else "")
    if outside is not None:
        said = (f"Outside the drafter's vocabulary: its q reads {holds}, and p puts {prob_text(outside)} of its mass "
                "outside it.")
        if cut and mass is not None and mass > outside:
            said += f" In all p puts {prob_text(mass)} where q is 0 ({cut})."
    else:   # an older trace: only the mass where q is 0, whatever made q 0 there
        said = f"Its q reads {holds}; p puts {prob_text(mass)} of its mass where q is 0" + (
            f" ({cut})." if cut else ".")
    if gen.settings.skip_adjustment:
        return (said + " No draft can be such a token. The exact rule gives those tokens through the residual; "
                "this run skipped the adjustment, so its output here is biased (the TV above), not p.")
    return said + " No draft can be such a token; only the residual gives it, which is why the output stays exactly p."
