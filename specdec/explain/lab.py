"""The exactness lab: one drafted position, tested millions of times, under four verify rules.

Given a target distribution p and a draft distribution q over a small vocabulary, draw a draft
x ~ q and a uniform u, run them through `sampling.verify` (the very function the decoder uses),
and record the emitted token: the draft when it was accepted, else the verdict's end token
(`specdec.explain.montecarlo` draws the trials).
Speculative sampling is exact when that emitted token follows p. The closed form
(`sampling.emission_parts`) says it does for the exact rule and by how much the shortcuts miss;
the Monte Carlo here checks both against each other with TV distance and a chi-square test.

"Exact" is a statement about the math: the exact rule's output distribution is p in real
arithmetic. Computed, the closed form runs in float32 (as the decoder does) and equals p to
float32 rounding over the row's sums, a few eps * sqrt(n); the rows a trace stores come from a
float32 softmax over the whole vocabulary, so they add up to 1 only to that rounding too.

No gradio and no command line here: the app's lab tab and the CLI's `lab` command are thin
layers over these functions, and bound the work a request may ask for where it enters.
"""

from __future__ import annotations

import math
import textwrap
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..core.checks import seed as seed_number
from ..core.checks import whole_number
from ..core.sampling import Rule, acceptance_probability, emission_parts, output_distribution
from .looks import LUMPED_TAIL, TAIL_LABELS, visible_token
from .montecarlo import as_tensor, checkpoints, simulate_many

RULES: tuple[Rule, ...] = (Rule.EXACT, Rule.SKIP_ADJUSTMENT, Rule.ACCEPT_ALL, Rule.GREEDY_MATCH)


class RuleName(NamedTuple):
    short: str     # table columns, hover labels, the acceptance chart's axis
    long: str      # the summary table, legends and panel titles


RULE_NAMES: dict[Rule, RuleName] = {
    Rule.EXACT: RuleName("exact", "exact (residual)"),
    Rule.SKIP_ADJUSTMENT: RuleName("skip adjustment", "skip adjustment (sample p on rejection)"),
    Rule.ACCEPT_ALL: RuleName("accept all", "accept every draft"),
    Rule.GREEDY_MATCH: RuleName("greedy match", "greedy match"),
}
MIN_TOKENS, MAX_TOKENS = 2, 20
ALPHA = 0.001              # chi-square significance level used for verdicts


# ---------------------------------------------------------------- presets

@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    tokens: tuple[str, ...]
    p: tuple[float, ...]
    q: tuple[float, ...]


_WORDS = ("the", "a", "cat", "dog", "sat", "ran", "on", "mat")

PRESETS: dict[str, Preset] = {pr.name: pr for pr in [
    Preset("over-confident", "The draft puts far too much mass on the target's favourite token.",
           _WORDS, (0.30, 0.20, 0.15, 0.12, 0.09, 0.07, 0.04, 0.03),
           (0.75, 0.10, 0.05, 0.04, 0.03, 0.02, 0.005, 0.005)),
    Preset("under-confident", "The draft is nearly flat where the target is peaked.",
           _WORDS, (0.55, 0.20, 0.10, 0.06, 0.04, 0.03, 0.01, 0.01),
           (0.16, 0.14, 0.13, 0.13, 0.12, 0.12, 0.10, 0.10)),
    Preset("disjoint", "Draft and target share no token: every draft is rejected (beta = 0).",
           _WORDS[:6], (0.5, 0.3, 0.2, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.6, 0.3, 0.1)),
    Preset("p == q", "A perfect draft: every draft is accepted (beta = 1).",
           _WORDS[:5], (0.4, 0.25, 0.15, 0.12, 0.08), (0.4, 0.25, 0.15, 0.12, 0.08)),
    Preset("one-hot draft", "A one-hot draft, as an n-gram (prompt lookup) drafter proposes.",
           _WORDS[:6], (0.35, 0.25, 0.15, 0.12, 0.08, 0.05), (0.0, 1.0, 0.0, 0.0, 0.0, 0.0)),
]}


def preset(name: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tokens, p, q) of a named preset; ValueError listing the names when unknown."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    pr = PRESETS[name]
    return list(pr.tokens), np.array(pr.p, dtype=np.float64), np.array(pr.q, dtype=np.float64)


# ---------------------------------------------------------------- validation and trace positions

# A sum of p or q further from 1 than this is normalised with a note (`validate`). A model's
# float32 softmax over a large vocabulary is further off: SmolLM2's p over 49,152 ids sums to
# 1 +- 1.5e-5 (median of 40 rows, measured), so a position taken from its run gets the note.
SUM_TOLERANCE = 1e-6


def sum_text(total: float) -> str:
    """A row's sum as every note prints it, with enough digits to show how far from 1 it is ("summed
    to 1" beside "normalised to 1" says nothing): one formatter, so one sum is never 1.0000019 in one
    sentence and 1.000003 in the next."""
    if not math.isfinite(total) or total == 1:
        return f"{total:.6g}"
    return f"{total:.{max(6, 2 - math.floor(math.log10(abs(total - 1))))}g}"


def validate(tokens, p, q, normalise: bool = True, tol: float = SUM_TOLERANCE
             ) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
    """Check a user's (tokens, p, q). Returns cleaned copies and notes (e.g. "p normalised").

    Raises ValueError with one message a user can act on: negative or non-finite numbers, too
    few or too many tokens, duplicate or empty names, no mass in p or q, or (normalise=False)
    sums that are not 1.
    """
    tokens = [str(t).strip() for t in tokens]
    try:
        p = np.asarray(p, dtype=np.float64).reshape(-1)
        q = np.asarray(q, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError("p and q must be numbers") from None
    if not (len(tokens) == len(p) == len(q)):
        raise ValueError(f"tokens, p and q must have the same length (got {len(tokens)}, {len(p)}, {len(q)})")
    if not MIN_TOKENS <= len(tokens) <= MAX_TOKENS:
        raise ValueError(f"the vocabulary must have {MIN_TOKENS} to {MAX_TOKENS} tokens, got {len(tokens)}")
    if any(not t for t in tokens):
        raise ValueError("every token needs a name (a row has an empty token)")
    dupes = sorted({t for t in tokens if tokens.count(t) > 1})
    if dupes:
        raise ValueError(f"token names must be unique: {', '.join(map(repr, dupes))} appear more than once")
    notes = []
    rows = {}
    for name, d in (("p", p), ("q", q)):
        if not np.all(np.isfinite(d)):
            bad = tokens[int(np.argmax(~np.isfinite(d)))]
            raise ValueError(f"{name} has a missing or non-finite value ({name}({bad!r}) = {d[~np.isfinite(d)][0]:g})")
        if np.any(d < 0):
            bad = tokens[int(np.argmax(d < 0))]
            raise ValueError(f"{name} must be non-negative ({name}({bad!r}) = {d[d < 0][0]:g})")
        top = d.max()
        if top <= 0:
            raise ValueError(f"{name} has no mass: give at least one token a positive probability")
        # Scale by the largest value before summing: weights like 1e308 are valid, their sum is not finite.
        scaled = d / top
        with np.errstate(over="ignore"):
            total = float(d.sum())
        if abs(total - 1) > tol:
            if not normalise:
                raise ValueError(f"{name} sums to {sum_text(total)}, not 1")
            # enough digits to show how far from 1 ("summed to 1" beside "normalised to 1" says nothing)
            notes.append(f"{name} summed to {sum_text(total)}, not 1; normalised to 1")
        rows[name] = scaled / scaled.sum()
    return tokens, rows["p"], rows["q"], notes


OTHER = f"({LUMPED_TAIL})"
TAIL_NAMES = tuple(f"({label})" for label in TAIL_LABELS)


def from_position(gen, round_index: int, position_index: int, max_tokens: int = MAX_TOKENS
                  ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tokens, p, q) at one drafted position of a `trace.Generation`, exact.

    The position's kept ids become named tokens, and the rest of the vocabulary two more: the
    tokens where p >= q and those where p < q (the trace stores the tail split that way). When
    more ids are kept than fit, the ones with least max(p, q) join the part of their own sign.
    Within a part min(p, q) and max(0, p - q) add up, so beta, the residual and the exact rule's
    closed form on these tokens equal those on the model's full rows; the skip rule's TV,
    sum |min(p, q) - beta p| / 2, does not add up (the sign changes within a part), so it can
    differ from the trace's full-row `skip_tv` (the app names both). A schema-1 trace stored
    one lumped tail: it becomes "(everything else)", and beta is then only approximate.
    """
    try:
        rnd = gen.rounds[round_index]
        pos = rnd.positions[position_index]
    except (IndexError, TypeError, AttributeError):
        raise ValueError(f"the last run has no drafted position (round {round_index}, "
                         f"position {position_index})") from None
    if round_index < 0 or position_index < 0:
        raise ValueError("round and position indices must be >= 0")
    split = pos.p.split is not None and pos.q.split is not None
    tails = ([list(pos.p.split), list(pos.q.split)] if split else [[pos.p.rest], [pos.q.rest]])
    tail_names = TAIL_NAMES if split else (OTHER,)
    rows = sorted(zip(pos.p.ids, pos.p.probs, pos.q.probs), key=lambda t: -max(t[1], t[2]))
    keep, fold = rows[:max_tokens - len(tail_names)], rows[max_tokens - len(tail_names):]
    for _, a, b in fold:
        part = 0 if (a >= b or not split) else 1
        tails[0][part] += a
        tails[1][part] += b
    names, seen = [], set(tail_names)
    for i, _, _ in keep:
        name = visible_token(gen.token(i))
        if name in seen:
            name = f"{name} #{i}"
        seen.add(name)
        names.append(name)
    p = [a for _, a, _ in keep] + tails[0]
    q = [b for _, _, b in keep] + tails[1]
    shown = [k for k in range(len(keep), len(p)) if p[k] > 0 or q[k] > 0]   # drop an empty part
    order = list(range(len(keep))) + shown
    names = names + [tail_names[k - len(keep)] for k in shown]
    p, q = np.array([p[k] for k in order], dtype=np.float64), np.array([q[k] for k in order], dtype=np.float64)
    return names, np.clip(p, 0, None), np.clip(q, 0, None)


def drafted_positions(gen) -> list[tuple[int, int]]:
    """Every (round, position) pair of a generation that has a drafted token."""
    if gen is None:
        return []
    return [(r, i) for r, rnd in enumerate(gen.rounds) for i in range(len(rnd.positions))]


# ---------------------------------------------------------------- closed forms

def tv(a, b) -> float:
    """Total-variation distance 0.5 * sum |a - b| (float64)."""
    return 0.5 * float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).sum())


def parts(p, q, rule: Rule) -> tuple[np.ndarray, np.ndarray]:
    """(P[emitted as accepted draft], P[emitted after a rejection]) per token, from sampling.emission_parts."""
    a, r = emission_parts(as_tensor(p), as_tensor(q), rule)
    return a.double().numpy(), r.double().numpy()


def closed_form(p, q, rule: Rule) -> np.ndarray:
    """Distribution of the emitted token under `rule` (sampling.output_distribution)."""
    return output_distribution(as_tensor(p), as_tensor(q), rule=rule).double().numpy()


def predicted_acceptance(p, q, rule: Rule) -> float:
    """Chance the draft is accepted under `rule`: beta = sum(min(p, q)) for the two ratio tests,
    1 for accept-all, q(argmax p) for greedy match."""
    return min(1.0, max(0.0, float(parts(p, q, rule)[0].sum())))


def beta(p, q) -> float:
    """sum(min(p, q)) = 1 - TV(p, q)."""
    return float(acceptance_probability(as_tensor(p), as_tensor(q)))


def bias(p, q, rule: Rule) -> float:
    """TV(output distribution under rule, p): 0 for exact."""
    return tv(closed_form(p, q, rule), np.asarray(p, dtype=np.float64))


def noise_floor(p, n) -> np.ndarray:
    """Expected TV between an n-sample empirical distribution and p (large-n normal approximation):
    0.5 * sum sqrt(2 p (1 - p) / (pi n)). The exact rule should track it; biased rules level off."""
    p = np.asarray(p, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    return 0.5 * np.sqrt(2 * p * (1 - p) / np.pi).sum() / np.sqrt(n)


# ---------------------------------------------------------------- statistics

def chi_square(counts, p) -> tuple[float, float]:
    """Pearson chi-square goodness of fit of counts to p: (statistic, p-value), scipy.stats.

    Tokens with p = 0 leave the test; if any of them was emitted the fit is impossible:
    (inf, 0.0). With fewer than two tokens of positive p there is nothing to test: (0.0, 1.0).
    """
    from scipy import stats

    counts = np.asarray(counts, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    support = p > 0
    if counts[~support].sum() > 0:
        return math.inf, 0.0
    if support.sum() < 2:
        return 0.0, 1.0
    n = counts.sum()
    expected = n * p[support] / p[support].sum()
    res = stats.chisquare(counts[support], expected)
    return float(res.statistic), float(res.pvalue)


def proportion_interval(k, n, z: float = 1.959963984540054) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval (95% by default) for k successes in n trials, elementwise."""
    k = np.asarray(k, dtype=np.float64)
    f = k / n
    denom = 1 + z * z / n
    centre = (f + z * z / (2 * n)) / denom
    half = z * np.sqrt(f * (1 - f) / n + z * z / (4 * n * n)) / denom
    return np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)


@dataclass
class RuleResult:
    """Everything the lab shows for one rule: the charts and tables read it, never recompute it."""

    rule: Rule
    n: int
    counts: np.ndarray              # [V] emitted-token counts
    frequencies: np.ndarray         # counts / n
    low: np.ndarray                 # 95% Wilson interval of each frequency
    high: np.ndarray
    accepted_part: np.ndarray       # closed form P[emitted as accepted draft]
    rejected_part: np.ndarray       # closed form P[emitted after a rejection]
    output: np.ndarray              # closed form output distribution (sum of the parts)
    bias: float                     # TV(output, p)
    tv: float                       # TV(frequencies, p)
    chi2: float
    pvalue: float
    acceptance_observed: float
    acceptance_low: float           # 95% Wilson interval of the observed acceptance rate
    acceptance_high: float
    acceptance_predicted: float
    curve_tv: list[float]           # TV(empirical, p) after each of LabResult.curve_n samples

    @property
    def rejects_p(self) -> bool:
        return self.pvalue < ALPHA


@dataclass
class LabResult:
    tokens: list[str]
    p: np.ndarray
    q: np.ndarray
    n: int
    seed: int
    beta: float                     # sum(min(p, q)) = 1 - TV(p, q)
    results: dict[Rule, RuleResult]
    curve_n: list[int]              # sample counts at which every rule's convergence curve is read
    noise_floor: np.ndarray         # expected TV of an exact sampler after each of curve_n samples
    notes: list[str]                # what validation changed, e.g. "p summed to 2; normalised to 1"
    seconds: float = 0.0


def run(tokens, p, q, n: int, seed: int, rules=RULES, threads: int = 1) -> LabResult:
    """Validate, then simulate every rule with the same seed (common random numbers: the same
    drafts and uniforms meet each rule), and compute every number the lab shows."""
    tokens, p, q, notes = validate(tokens, p, q)
    n = whole_number(n, "the number of samples", 1)
    seed = seed_number(seed, "the seed")
    start = time.perf_counter()
    at = checkpoints(n)
    results = {Rule(rule): _rule_result(p, q, Rule(rule), n, seed, at, threads) for rule in rules}
    return LabResult(tokens, p, q, n, int(seed), beta(p, q), results, curve_n=at, noise_floor=noise_floor(p, at),
                     notes=notes, seconds=time.perf_counter() - start)


def _rule_result(p, q, rule: Rule, n: int, seed: int, at: list[int], threads: int) -> RuleResult:
    cumulative, accepted = simulate_many(p[None], q[None], rule, n, seed, at=at, threads=threads)
    counts, accepted = cumulative[0, -1], int(accepted[0])
    frequencies = counts / n
    low, high = proportion_interval(counts, n)
    acceptance_low, acceptance_high = proportion_interval(accepted, n)
    accepted_part, rejected_part = parts(p, q, rule)
    chi2, pvalue = chi_square(counts, p)
    return RuleResult(
        rule=rule, n=n, counts=counts, frequencies=frequencies, low=low, high=high,
        accepted_part=accepted_part, rejected_part=rejected_part, output=closed_form(p, q, rule),
        bias=bias(p, q, rule), tv=tv(frequencies, p), chi2=chi2, pvalue=pvalue,
        acceptance_observed=accepted / n, acceptance_low=float(acceptance_low),
        acceptance_high=float(acceptance_high), acceptance_predicted=predicted_acceptance(p, q, rule),
        curve_tv=[tv(c / m, p) for c, m in zip(cumulative[0], at)])


# ---------------------------------------------------------------- tables (the charts' fallbacks)

def _fmt(x: float, digits: int = 4) -> str:
    if x == math.inf:
        return "inf"
    if x != 0 and abs(x) < 10 ** -digits:
        return f"{x:.2e}"
    return f"{x:.{digits}f}"


def closed_form_text(x: float) -> str:
    """A closed-form TV as every view shows it: 4 decimals, and 0 for the exact rule, whose closed
    form is 0 and computes as a float32 rounding of 1e-8 or so."""
    return "0" if abs(x) < EXACT_TOLERANCE else f"{x:.4f}"


EXACT_TOLERANCE = 1e-6   # a closed-form TV under this is float rounding of 0

SUMMARY_HEADERS = ["rule", "TV(output, p) closed form", "TV(observed, p)", "chi-square", "p-value",
                   f"matches p? (α = {ALPHA})", "acceptance predicted", "acceptance observed"]


# The same columns for a terminal: short rule names, and groups `format_table` sets under one name.
SUMMARY_HEADERS_SHORT = ["rule", "TV to p: closed form", "TV to p: observed", "chi-square", "p-value",
                         f"matches p? (α = {ALPHA})", "acceptance: predicted", "acceptance: observed"]


def summary_table(lab: LabResult, short: bool = False) -> tuple[list[str], list[list]]:
    """Per rule: bias (closed form), observed TV, chi-square, p-value, verdict, acceptance
    (`short`: the terminal's names and headers)."""
    # The observed TVs' column says the sampling noise in them (an exact sampler's expected TV at
    # this N): an observed 0.0632 against a closed form 0.0618 then reads as the noise it is.
    headers = list(SUMMARY_HEADERS_SHORT if short else SUMMARY_HEADERS)
    headers[2] += f" (noise ≈ {_fmt(float(noise_floor(lab.p, lab.n)))})"
    rows = []
    for rule, r in lab.results.items():
        rows.append([RULE_NAMES[rule].short if short else RULE_NAMES[rule].long, closed_form_text(r.bias),
                     _fmt(r.tv), _fmt(r.chi2, 2), _fmt(r.pvalue), "rejected" if r.rejects_p else "not rejected",
                     _fmt(r.acceptance_predicted), _fmt(r.acceptance_observed)])
    return headers, rows


def decomposition_table(lab: LabResult) -> tuple[list[str], list[list]]:
    headers = ["token", "p", "q"]
    for rule in lab.results:
        s = RULE_NAMES[rule].short
        headers += [f"{s}: accepted draft", f"{s}: after rejection", f"{s}: total"]
    rows = []
    for j, t in enumerate(lab.tokens):
        row = [t, _fmt(lab.p[j]), _fmt(lab.q[j])]
        for r in lab.results.values():
            row += [_fmt(r.accepted_part[j]), _fmt(r.rejected_part[j]), _fmt(r.output[j])]
        rows.append(row)
    return headers, rows


def histogram_table(lab: LabResult) -> tuple[list[str], list[list]]:
    headers = ["token", "p"] + [f"{RULE_NAMES[r].short}: observed [95% interval]" for r in lab.results]
    rows = []
    for j, t in enumerate(lab.tokens):
        rows.append([t, _fmt(lab.p[j])] + [
            f"{_fmt(r.frequencies[j])} [{_fmt(r.low[j])}, {_fmt(r.high[j])}]" for r in lab.results.values()])
    return headers, rows


def convergence_table(lab: LabResult) -> tuple[list[str], list[list]]:
    headers = ["samples", "noise floor (expected TV of an exact sampler)"] + \
              [f"{RULE_NAMES[r].short}: TV" for r in lab.results]
    rows = [[m, _fmt(float(lab.noise_floor[i]))] + [_fmt(r.curve_tv[i]) for r in lab.results.values()]
            for i, m in enumerate(lab.curve_n)]
    rows.append(["bias (limit)", "0"] + [closed_form_text(r.bias) for r in lab.results.values()])
    return headers, rows


def acceptance_table(lab: LabResult) -> tuple[list[str], list[list]]:
    headers = ["rule", "predicted", "observed", "95% interval"]
    rows = [[RULE_NAMES[rule].long, _fmt(r.acceptance_predicted), _fmt(r.acceptance_observed),
             f"[{_fmt(r.acceptance_low)}, {_fmt(r.acceptance_high)}]"] for rule, r in lab.results.items()]
    return headers, rows


def format_table(headers, rows, width: int = 80) -> str:
    """Plain-text table for the CLI, no wider than `width` where the cells allow: headers wrap at
    spaces, columns named "group: name" sit under one line naming the group, and a table still too
    wide is cut into several that each repeat the leading columns (those before the first group;
    the first column when there are no groups)."""
    heads = [h.split(": ", 1) if ": " in h else [None, h] for h in map(str, headers)]
    cells = [list(map(str, r)) for r in rows]
    widths = [max([len(w) for w in name.split()] + [len(r[i]) for r in cells] + [1])
              for i, (_, name) in enumerate(heads)]
    grouped = [i for i, (group, _) in enumerate(heads) if group]
    keys = list(range(grouped[0])) if grouped and grouped[0] > 0 else [0]
    blocks: list[list[int]] = []   # the other columns, a group's columns kept together
    for i in range(len(heads)):
        if i in keys:
            continue
        if blocks and heads[i][0] and heads[i][0] == heads[blocks[-1][-1]][0]:
            blocks[-1].append(i)
        else:
            blocks.append([i])
    for block in blocks:   # a group's name fits above its columns
        group = heads[block[0]][0] or ""
        widths[block[-1]] += max(0, len(group) - (sum(widths[i] for i in block) + 2 * (len(block) - 1)))
    span = lambda cols: sum(widths[i] for i in cols) + 2 * len(cols)   # noqa: E731
    chunks: list[list[int]] = []
    for block in blocks:
        if chunks and span(keys) + span(chunks[-1] + block) - 2 <= width:
            chunks[-1] += block
        else:
            chunks.append(list(block))
    return "\n\n".join(_table_part(heads, cells, widths, keys + chunk) for chunk in chunks or [[]])


def _table_part(heads, cells, widths, cols) -> str:
    """One table of `format_table`: the group line, the wrapped headers, a rule, the rows."""
    def line(texts):
        return "  ".join(t.ljust(widths[i]) for t, i in zip(texts, cols)).rstrip()

    out = []
    if any(heads[i][0] for i in cols):
        groups = [heads[i][0] if heads[i][0] and (n == 0 or heads[cols[n - 1]][0] != heads[i][0]) else ""
                  for n, i in enumerate(cols)]
        text = ""
        for n, group in enumerate(groups):   # each name starts above its group's first column
            if group:
                text = text.ljust(sum(widths[j] + 2 for j in cols[:n])) + group
        out.append(text)
    wrapped = [textwrap.wrap(heads[i][1], widths[i], break_long_words=False) or [""] for i in cols]
    depth = max(len(w) for w in wrapped)
    for k in range(depth):   # bottom-aligned: every header's last line sits on the rule
        out.append(line([w[k - depth + len(w)] if k >= depth - len(w) else "" for w in wrapped]))
    out.append(line(["-" * widths[i] for i in cols]))
    out += [line([r[i] for i in cols]) for r in cells]
    return "\n".join(out)
