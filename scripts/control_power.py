"""Size the suite's statistical checks by their power: how sure each skip-adjustment control is to fail,
and the smallest bias each exactness check catches, at a number of runs. The suite's RUNS
(tests/test_decoding.py, tests/test_features.py, tests/test_vocab_subset.py) are sized from what this
prints.

    python scripts/control_power.py            # 2,000 control runs each (about a minute)

It samples each control (the skip-adjustment rule: biased on purpose) at --runs, takes its
chi-square statistic X against the exact joint, estimates the noncentrality as X - df, and
prints, for smaller numbers of runs, the control's power and the noncentrality (as a fraction of
the control's) that an exactness check catches with probability 0.99, at the tests' SIGNIFICANCE.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import torch  # noqa: E402
from scipy.optimize import brentq  # noqa: E402
from scipy.stats import chi2, chisquare, ncx2  # noqa: E402

import test_decoding as td  # noqa: E402
import test_features as tf  # noqa: E402
import test_vocab_subset as tv  # noqa: E402
from specdec import Rule, RunSettings, SamplingConfig, speculative_generate  # noqa: E402
from tiny import tiny_pair  # noqa: E402


def chi_square(samples: list[int], joint: torch.Tensor) -> tuple[float, int]:
    """(statistic, degrees of freedom), with the cells pooled as `test_decoding.gof_p_value` pools them."""
    n = len(samples)
    expected = (joint.flatten().double() * n).numpy()
    observed = torch.bincount(torch.tensor(samples), minlength=joint.numel()).double().numpy()
    big = expected >= 5
    obs, exp = list(observed[big]) + [observed[~big].sum()], list(expected[big]) + [expected[~big].sum()]
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp = [e * sum(obs) / sum(exp) for e in exp]
    return float(chisquare(obs, exp).statistic), len(obs) - 1


def report(name: str, samples: list[int], joint: torch.Tensor, sizes=(500, 750, 1000, 1500, 2000)) -> None:
    x, df = chi_square(samples, joint)
    crit = chi2.ppf(1 - td.SIGNIFICANCE, df)
    per_run = max(x - df, 0.0) / len(samples)
    print(f"{name}: {len(samples)} runs, X = {x:.1f} on {df} df (critical {crit:.1f}), noncentrality ≈ {x - df:.1f}")
    for n in sizes:
        lam = per_run * n
        caught = brentq(lambda v: ncx2.sf(crit, df, v) - 0.99, 1e-6, 1e5)
        print(f"  {n:5d} runs: control fails with p = 1 - {ncx2.cdf(crit, df, lam):.1e}; "
              f"a bias of {caught / lam:.2f}× the control's noncentrality is caught 99% of the time")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    n = parser.parse_args().runs
    sampling = SamplingConfig(temperature=1.0)
    pair = tiny_pair(vocab=8, seed=0)
    skip = RunSettings(gamma=2, max_new_tokens=3, sampling=sampling, rule=Rule.SKIP_ADJUSTMENT)
    report("test_decoding (model drafter)",
           [td.first_two(speculative_generate(pair, td.PROMPT, skip.with_(seed=s))) for s in range(n)],
           td.exact_joint(pair, td.PROMPT, sampling))
    pair = tf.features_pair(tiny_pair(vocab=8, seed=0), seed=1)
    skip = skip.with_(max_new_tokens=4, drafter="features")
    report("test_features (features drafter)",
           [tf.tokens_2_3(speculative_generate(pair, tf.PROMPT, skip.with_(seed=s))) for s in range(n)],
           tf.exact_joint_2_3(pair, tf.PROMPT, sampling))
    pair = tv.subset_pair(tiny_pair(vocab=8, seed=0), [1, 4, 6], seed=1)
    report("test_vocab_subset (features drafter through a subset)",
           [tf.tokens_2_3(speculative_generate(pair, tf.PROMPT, skip.with_(seed=s))) for s in range(n)],
           tf.exact_joint_2_3(pair, tf.PROMPT, sampling), sizes=(500, 600, 700, 1000, 2000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
