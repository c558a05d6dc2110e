"""The exactness lab: one drafted position, tested millions of times, under four verify rules.

Given a target distribution p and a draft distribution q over a small vocabulary, draw a draft
x ~ q and a uniform u, run them through `sampling.verify` (the very function the decoder uses),
and record the emitted token: the draft when it was accepted, else the verdict's end token.
Speculative sampling is exact when that emitted token follows p. The closed form
(`sampling.emission_parts`) says it does for the exact rule and by how much the shortcuts miss;
the Monte Carlo here checks both against each other with TV distance and a chi-square test.

No gradio here: the UI (`lab_ui`) and the CLI (`cli_main`) are thin layers over these functions.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .sampling import Rule, acceptance_probability, emission_parts, output_distribution, sample, verify
from .trace import visible_token

RULES: tuple[Rule, ...] = (Rule.EXACT, Rule.SKIP_ADJUSTMENT, Rule.ACCEPT_ALL, Rule.GREEDY_MATCH)
RULE_LABELS = {
    Rule.EXACT: "exact (residual)",
    Rule.SKIP_ADJUSTMENT: "skip adjustment (sample p on rejection)",
    Rule.ACCEPT_ALL: "accept every draft",
    Rule.GREEDY_MATCH: "greedy match",
}
RULE_SHORT = {Rule.EXACT: "exact", Rule.SKIP_ADJUSTMENT: "skip adjustment",
              Rule.ACCEPT_ALL: "accept all", Rule.GREEDY_MATCH: "greedy match"}
MIN_TOKENS, MAX_TOKENS = 2, 20
MAX_SAMPLES = 1_000_000
CHUNK = 1 << 16            # rows per verify call: bounds memory to ~20 MB at V = 20 (and stays cache-friendly)
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

def validate(tokens, p, q, normalise: bool = True, tol: float = 1e-6
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
    for name, d in (("p", p), ("q", q)):
        if not np.all(np.isfinite(d)):
            raise ValueError(f"{name} has a missing or non-finite value")
        if np.any(d < 0):
            bad = tokens[int(np.argmax(d < 0))]
            raise ValueError(f"{name} must be non-negative ({name}({bad!r}) = {d[d < 0][0]:g})")
        total = d.sum()
        if total <= 0:
            raise ValueError(f"{name} has no mass: give at least one token a positive probability")
        if abs(total - 1) > tol:
            if not normalise:
                raise ValueError(f"{name} sums to {total:.6g}, not 1")
            notes.append(f"{name} summed to {total:.6g}; normalised to 1")
    return tokens, p / p.sum(), q / q.sum(), notes


def display_token(text: str) -> str:
    """Make a token's text visible in a table: spaces, newlines and tabs get symbols."""
    return visible_token(text)


OTHER = "(everything else)"


def from_position(gen, round_index: int, position_index: int, max_tokens: int = MAX_TOKENS
                  ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tokens, p, q) at one drafted position of a `trace.Generation`.

    The position's kept ids (the union of p's and q's top tokens) become named tokens; one more
    token, "(everything else)", carries the exact remaining mass p.rest and q.rest. When more
    than max_tokens - 1 ids are kept, the ones with least max(p, q) are folded into it too.
    """
    try:
        rnd = gen.rounds[round_index]
        pos = rnd.positions[position_index]
    except (IndexError, TypeError, AttributeError):
        raise ValueError(f"the last run has no drafted position (round {round_index}, "
                         f"position {position_index})") from None
    if round_index < 0 or position_index < 0:
        raise ValueError("round and position indices must be >= 0")
    ids = list(pos.p.ids)
    p_of = dict(zip(pos.p.ids, pos.p.probs))
    q_of = dict(zip(pos.q.ids, pos.q.probs))
    ids += [i for i in pos.q.ids if i not in p_of]
    ids.sort(key=lambda i: -max(p_of.get(i, 0.0), q_of.get(i, 0.0)))
    keep, fold = ids[:max_tokens - 1], ids[max_tokens - 1:]
    names, seen = [], set()
    for i in keep:
        name = display_token(gen.token(i))
        if name in seen or name == OTHER:
            name = f"{name} #{i}"
        seen.add(name)
        names.append(name)
    p = [p_of.get(i, 0.0) for i in keep] + [pos.p.rest + sum(p_of.get(i, 0.0) for i in fold)]
    q = [q_of.get(i, 0.0) for i in keep] + [pos.q.rest + sum(q_of.get(i, 0.0) for i in fold)]
    p, q = np.clip(np.array(p, dtype=np.float64), 0, None), np.clip(np.array(q, dtype=np.float64), 0, None)
    return names + [OTHER], p, q


def drafted_positions(gen) -> list[tuple[int, int]]:
    """Every (round, position) pair of a generation that has a drafted token."""
    if gen is None:
        return []
    return [(r, i) for r, rnd in enumerate(gen.rounds) for i in range(len(rnd.positions))]


# ---------------------------------------------------------------- closed forms

def _t(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=torch.float32)


def tv(a, b) -> float:
    """Total-variation distance 0.5 * sum |a - b| (float64)."""
    return 0.5 * float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).sum())


def parts(p, q, rule: Rule) -> tuple[np.ndarray, np.ndarray]:
    """(P[emitted as accepted draft], P[emitted after a rejection]) per token, from sampling.emission_parts."""
    a, r = emission_parts(_t(p), _t(q), rule)
    return a.double().numpy(), r.double().numpy()


def closed_form(p, q, rule: Rule) -> np.ndarray:
    """Distribution of the emitted token under `rule` (sampling.output_distribution)."""
    return output_distribution(_t(p), _t(q), rule=rule).double().numpy()


def predicted_acceptance(p, q, rule: Rule) -> float:
    """Chance the draft is accepted under `rule`: beta = sum(min(p, q)) for the two ratio tests,
    1 for accept-all, q(argmax p) for greedy match."""
    return min(1.0, max(0.0, float(parts(p, q, rule)[0].sum())))


def beta(p, q) -> float:
    """sum(min(p, q)) = 1 - TV(p, q)."""
    return float(acceptance_probability(_t(p), _t(q)))


def bias(p, q, rule: Rule) -> float:
    """TV(output distribution under rule, p): 0 for exact."""
    return tv(closed_form(p, q, rule), np.asarray(p, dtype=np.float64))


def noise_floor(p, n) -> np.ndarray:
    """Expected TV between an n-sample empirical distribution and p (large-n normal approximation):
    0.5 * sum sqrt(2 p (1 - p) / (pi n)). The exact rule should track it; biased rules level off."""
    p = np.asarray(p, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    return 0.5 * np.sqrt(2 * p * (1 - p) / np.pi).sum() / np.sqrt(n)


# ---------------------------------------------------------------- Monte Carlo through verify

def checkpoints(n: int, start: int = 10) -> list[int]:
    """Sample counts at which the convergence curve is read: 1, 2, 5 per decade, and n."""
    out = []
    decade = 1
    while decade <= n:
        out += [m * decade for m in (1, 2, 5) if start <= m * decade < n]
        decade *= 10
    return sorted(set(out)) + [n]


def simulate_many(p, q, rule: Rule, n: int, seed: int, at: list[int] | None = None,
                  chunk: int = CHUNK, threads: int | None = 1) -> tuple[np.ndarray, np.ndarray]:
    """n single-position trials for each of C cases at once, through `sampling.verify`.

    p, q: [C, V] (rows may be zero-padded to a common V). Each trial drafts x ~ q (inverse CDF),
    draws u ~ U[0, 1), and calls verify with p [B, 2, V] (row 1, the bonus row, is unused),
    q [B, 1, V], drafts [B, 1], u [B, 1]; the emitted token is x when accepted, else the end
    token. All randomness comes from one torch.Generator seeded with `seed`.

    Returns (counts [C, K, V] cumulative counts after each of the K sample counts in `at`
    (default [n]), accepted [C] number of accepted drafts over all n trials).

    threads: torch intra-op threads while simulating (None = leave as is). One by default: these
    are small memory-bound ops, and on a shared 2-core CPU a second thread made them 3-10x
    slower (measured). The setting is OpenMP's per-thread one and is restored afterwards.
    """
    if threads is None:
        return _simulate(p, q, rule, n, seed, at, chunk)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _simulate(p, q, rule, n, seed, at, chunk)
    finally:
        torch.set_num_threads(before)


def _simulate(p, q, rule, n, seed, at, chunk):
    if n < 1:
        raise ValueError("number of samples must be >= 1")
    at = sorted(set(at or [n]))
    if at[-1] != n or at[0] < 1:
        raise ValueError("checkpoints must lie in [1, n] and end at n")
    P = _t(p)
    Q = _t(q)
    if P.dim() == 1:
        P, Q = P[None], Q[None]
    C, V = P.shape
    if (Q.sum(-1) <= 0).any():
        raise ValueError("q has no mass")
    gen = torch.Generator().manual_seed(int(seed))
    counts = torch.zeros(C, V, dtype=torch.int64)
    out = torch.zeros(C, len(at), V, dtype=torch.int64)
    accepted = torch.zeros(C, dtype=torch.int64)
    per = max(1, chunk // C)          # trials per case in one verify call
    done, k = 0, 0
    p_rows = P[:, None, None, :]      # [C, 1, 1, V]
    q_rows = Q[:, None, None, :]
    while done < n:
        m = min(per, n - done)
        drafts = sample(Q[:, None, :].expand(C, m, V), gen)        # x ~ q, [C, m]: the decoder's sampler
        u = torch.rand(C * m, 1, generator=gen)
        if C == 1:    # expanded views, no copy
            p_b, q_b = P[0].expand(m, 2, V), Q[0].expand(m, 1, V)
        else:
            p_b = p_rows.expand(C, m, 2, V).reshape(C * m, 2, V)
            q_b = q_rows.expand(C, m, 1, V).reshape(C * m, 1, V)
        verdict = verify(p_b, q_b,
                         drafts.reshape(C * m, 1), u, generator=gen, rule=rule)
        acc = verdict.accepted[:, 0].reshape(C, m)
        emitted = torch.where(acc, drafts, verdict.end_token.reshape(C, m))
        accepted += acc.sum(-1)
        # Cumulative counts at every checkpoint inside this chunk, then the chunk's total.
        while k < len(at) and at[k] <= done + m:
            head = emitted[:, :at[k] - done]
            out[:, k] = counts + torch.zeros(C, V, dtype=torch.int64).scatter_add_(
                1, head, torch.ones_like(head))
            k += 1
        counts.scatter_add_(1, emitted, torch.ones_like(emitted))
        done += m
    return out.numpy(), accepted.numpy()


def simulate(p, q, rule: Rule, n: int, seed: int, threads: int | None = 1) -> np.ndarray:
    """Counts [V] of the emitted token over n trials of one position (see simulate_many)."""
    counts, _ = simulate_many(np.asarray(p)[None], np.asarray(q)[None], rule, n, seed, threads=threads)
    return counts[0, -1]


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
    """Everything the lab shows for one rule."""

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
    acceptance_predicted: float
    curve_n: list[int] = field(default_factory=list)
    curve_tv: list[float] = field(default_factory=list)

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
    seconds: float = 0.0


def run(tokens, p, q, n: int, seed: int, rules=RULES) -> LabResult:
    """Validate, then simulate every rule with the same seed (common random numbers: the same
    drafts and uniforms meet each rule), and compute every number the lab shows."""
    tokens, p, q, _ = validate(tokens, p, q)
    n = int(n)
    if not 1 <= n <= MAX_SAMPLES:
        raise ValueError(f"number of samples must be between 1 and {MAX_SAMPLES:,}, got {n}")
    start = time.perf_counter()
    at = checkpoints(n)
    results = {}
    for rule in rules:
        rule = Rule(rule)
        cum, acc = simulate_many(p[None], q[None], rule, n, seed, at=at)
        counts = cum[0, -1]
        freq = counts / n
        lo, hi = proportion_interval(counts, n)
        a, r = parts(p, q, rule)
        chi2, pv = chi_square(counts, p)
        results[rule] = RuleResult(
            rule=rule, n=n, counts=counts, frequencies=freq, low=lo, high=hi,
            accepted_part=a, rejected_part=r, output=a + r, bias=tv(a + r, p), tv=tv(freq, p),
            chi2=chi2, pvalue=pv, acceptance_observed=float(acc[0]) / n,
            acceptance_predicted=min(1.0, float(a.sum())),
            curve_n=list(at), curve_tv=[tv(c / m, p) for c, m in zip(cum[0], at)])
    return LabResult(tokens, p, q, n, int(seed), beta(p, q), results, time.perf_counter() - start)


# ---------------------------------------------------------------- tables (the charts' fallbacks)

def _fmt(x: float, digits: int = 4) -> str:
    if x == math.inf:
        return "inf"
    if x != 0 and abs(x) < 10 ** -digits:
        return f"{x:.2e}"
    return f"{x:.{digits}f}"


def summary_table(lab: LabResult) -> tuple[list[str], list[list]]:
    """Per rule: bias (closed form), observed TV, chi-square, p-value, verdict, acceptance."""
    headers = ["rule", "TV(output, p) closed form", "TV(observed, p)", "chi-square", "p-value",
               f"matches p? (α = {ALPHA})", "acceptance predicted", "acceptance observed"]
    rows = []
    for rule, r in lab.results.items():
        rows.append([RULE_LABELS[rule], _fmt(r.bias), _fmt(r.tv), _fmt(r.chi2, 2), _fmt(r.pvalue),
                     "rejected" if r.rejects_p else "not rejected",
                     _fmt(r.acceptance_predicted), _fmt(r.acceptance_observed)])
    return headers, rows


def decomposition_table(lab: LabResult) -> tuple[list[str], list[list]]:
    headers = ["token", "p", "q"]
    for rule in lab.results:
        s = RULE_SHORT[rule]
        headers += [f"{s}: accepted draft", f"{s}: after rejection", f"{s}: total"]
    rows = []
    for j, t in enumerate(lab.tokens):
        row = [t, _fmt(lab.p[j]), _fmt(lab.q[j])]
        for r in lab.results.values():
            row += [_fmt(r.accepted_part[j]), _fmt(r.rejected_part[j]), _fmt(r.output[j])]
        rows.append(row)
    return headers, rows


def histogram_table(lab: LabResult) -> tuple[list[str], list[list]]:
    headers = ["token", "p"] + [f"{RULE_SHORT[r]}: observed [95% interval]" for r in lab.results]
    rows = []
    for j, t in enumerate(lab.tokens):
        rows.append([t, _fmt(lab.p[j])] + [
            f"{_fmt(r.frequencies[j])} [{_fmt(r.low[j])}, {_fmt(r.high[j])}]" for r in lab.results.values()])
    return headers, rows


def convergence_table(lab: LabResult) -> tuple[list[str], list[list]]:
    first = next(iter(lab.results.values()))
    headers = ["samples", "noise floor (expected TV of an exact sampler)"] + \
              [f"{RULE_SHORT[r]}: TV" for r in lab.results]
    floor = noise_floor(lab.p, first.curve_n)
    rows = [[m, _fmt(float(floor[i]))] + [_fmt(r.curve_tv[i]) for r in lab.results.values()]
            for i, m in enumerate(first.curve_n)]
    rows.append(["bias (limit)", "0"] + [_fmt(r.bias) for r in lab.results.values()])
    return headers, rows


def acceptance_table(lab: LabResult) -> tuple[list[str], list[list]]:
    headers = ["rule", "predicted", "observed", "95% interval"]
    rows = []
    for rule, r in lab.results.items():
        lo, hi = proportion_interval(r.acceptance_observed * r.n, r.n)
        rows.append([RULE_LABELS[rule], _fmt(r.acceptance_predicted), _fmt(r.acceptance_observed),
                     f"[{_fmt(float(lo))}, {_fmt(float(hi))}]"])
    return headers, rows


def format_table(headers, rows) -> str:
    """Plain-text table for the CLI."""
    cells = [list(map(str, headers))] + [list(map(str, r)) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---------------------------------------------------------------- benchmark and CLI

def benchmark_vocab(v: int, n: int = MAX_SAMPLES, seed: int = 0, repeats: int = 3, threads: int = 1) -> float:
    """Best-of-`repeats` seconds for n samples of the exact rule on a fixed random (p, q) of size v."""
    g = torch.Generator().manual_seed(1234 + v)
    p, q = torch.rand(v, generator=g, dtype=torch.float64), torch.rand(v, generator=g, dtype=torch.float64)
    p, q = (p / p.sum()).numpy(), (q / q.sum()).numpy()
    simulate(p, q, Rule.EXACT, 1000, seed, threads=threads)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        simulate(p, q, Rule.EXACT, n, seed, threads=threads)
        best = min(best, time.perf_counter() - t0)
    return best


class _Parser(argparse.ArgumentParser):
    def error(self, message):          # one clear line on stderr, exit status 2
        raise _UsageError(message)


class _UsageError(Exception):
    pass


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise _UsageError(f"expected comma-separated numbers, got {text!r}") from None


def cli_main(argv: list[str]) -> int:
    """`python -m specdec lab ...`: print a table per rule (TV, chi-square, p-value, acceptance)."""
    ap = _Parser(prog="specdec lab", description="Monte Carlo test of the speculative verify step.")
    ap.add_argument("--preset", default="over-confident", help=f"one of: {', '.join(PRESETS)}")
    ap.add_argument("--p", help="target distribution, comma-separated (overrides the preset)")
    ap.add_argument("--q", help="draft distribution, comma-separated (with --p)")
    ap.add_argument("--tokens", help="token names, comma-separated (default t0, t1, ...)")
    ap.add_argument("--samples", type=int, default=100_000, help=f"1 to {MAX_SAMPLES:,}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bench", action="store_true", help=f"print samples/second for {MAX_SAMPLES:,} samples")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads for --bench (default 1)")
    try:
        args = ap.parse_args(argv)
        if args.threads < 1:
            raise _UsageError("--threads must be >= 1")
        if args.bench:
            for v in (8, 20):
                s = benchmark_vocab(v, threads=args.threads)
                print(f"exact rule, V = {v:>2}: {MAX_SAMPLES:,} samples in {s:.3f} s "
                      f"= {MAX_SAMPLES / s:,.0f} samples/s (best of 3, {args.threads} torch thread(s))")
            return 0
        if (args.p is None) != (args.q is None):
            raise _UsageError("give both --p and --q, or neither")
        if args.p is not None:
            p, q = _floats(args.p), _floats(args.q)
            tokens = args.tokens.split(",") if args.tokens else [f"t{i}" for i in range(len(p))]
            name = "custom"
        else:
            tokens, p, q = preset(args.preset)
            name = args.preset
        if not 1 <= args.samples <= MAX_SAMPLES:
            raise _UsageError(f"--samples must be between 1 and {MAX_SAMPLES:,}, got {args.samples}")
        tokens, p, q, notes = validate(tokens, p, q)
        lab = run(tokens, p, q, args.samples, args.seed)
    except (_UsageError, ValueError) as err:
        print(f"specdec lab: error: {err}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}")
    print(f"{name}: {len(tokens)} tokens, {lab.n:,} samples, seed {lab.seed}, "
          f"beta = sum(min(p, q)) = {lab.beta:.4f}   ({lab.seconds:.2f} s)\n")
    print(format_table(*decomposition_table(lab)))
    print()
    print(format_table(*summary_table(lab)))
    return 0


if __name__ == "__main__":    # pragma: no cover
    raise SystemExit(cli_main(sys.argv[1:]))
