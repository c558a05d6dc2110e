"""γ picked from what was measured (`specdec.explain.gamma`): the drafter card's α and a committed
cost profile of the pair on this kind of device. Pure arithmetic and file reading: no model runs."""

from __future__ import annotations

import json

import pytest

from specdec.explain.gamma import TIE, card_alpha, committed_profile, gamma_for, pick_gamma, predictions
from specdec.explain.speed import CostProfile, leviathan_speedup
from specdec.models.pair import features_folder_of

REAL = "smollm2-135m"


@pytest.fixture(autouse=True)
def no_costs_measured_here(monkeypatch):
    """Picks read the committed profiles only: costs this machine measured (`explain.calibrate`,
    in the user's cache) would make a pick depend on the machine the tests run on."""
    import specdec.explain.gamma as gamma

    monkeypatch.setattr(gamma, "stored", lambda *args, **kwargs: None)
# A verify's cost by width as a 2-core CPU measured it for SmolLM2-135M (bench, 2026-11-27: one
# target step 139 ms; over 2, 3, 4, 5 tokens 1.06, 1.21, 1.69, 1.59 steps) and its features drafter's c.
STEP = 139.3
CPU = CostProfile("cpu", "this CPU", "2026-11-27", "cpu", "float32", "eager", STEP, 0.05 * STEP,
                  {1: STEP, 2: 1.06 * STEP, 3: 1.21 * STEP, 4: 1.69 * STEP, 5: 1.59 * STEP}, pair=REAL,
                  drafter="features")


def test_the_pick_is_the_best_predicted_speedup_over_the_measured_widths_only():
    predicted = predictions(0.42, CPU)
    assert sorted(predicted) == [1, 2, 3, 4]   # γ 5 needs a verify over 6 tokens: not measured, not guessed
    for g, x in predicted.items():
        assert x == leviathan_speedup(0.42, g, 0.05, CPU.verify_ms_by_width[g + 1] / STEP)
    pick = pick_gamma(0.42, CPU, "its card, greedy")
    assert pick.gamma == 1 and pick.speedup == max(predicted.values()) > 1 > predicted[4]
    said = pick.sentence()
    assert said.startswith("γ 1 picked") and "α 0.42 (its card, greedy)" in said and f"{pick.speedup:.2f}×" in said
    assert f"γ 4 {predicted[4]:.2f}×" in said


def test_with_a_verify_as_cheap_as_a_step_the_same_alpha_picks_a_deeper_gamma():
    """The control: Leviathan et al.'s v = 1 (a GPU's nearly free verify) moves the pick off γ 1 at
    the same α and c, so it is the measured verify that chose γ 1 above."""
    flat = CostProfile("flat", "a GPU", "-", "cuda", "float32", "graphs", STEP, 0.05 * STEP,
                       {w: STEP for w in range(1, 10)})
    pick = pick_gamma(0.42, flat)
    best = max(leviathan_speedup(0.42, g, 0.05) for g in range(1, 9))
    assert pick.gamma > 1 and pick.speedup >= (1 - TIE) * best and leviathan_speedup(0.42, 1, 0.05) < 0.95 * best


def test_ties_go_to_the_smaller_gamma_and_no_verify_width_means_no_pick():
    same = CostProfile("same", "x", "-", "cpu", "float32", "eager", 1.0, 0.0, {1: 1.0, 2: 1.0, 3: 1.0})
    assert pick_gamma(1.0 - 1e-12, same).gamma == 2   # α≈1, c 0, v 1: γ 2 yields most
    assert pick_gamma(0.0, same).gamma == 1            # α 0: every γ yields one token a round, a tie
    # Within TIE (1 %) of the best is a tie too: at α 0.1, γ 2 yields 1.11 tokens a round against γ 1's
    # 1.10 at the same cost (0.9 % more): γ 1. At α 0.5 (1.75 against 1.5) γ 2 is better outright.
    two = CostProfile("two", "x", "-", "cpu", "float32", "eager", 1.0, 0.0, {1: 1.0, 2: 1.0, 3: 1.0})
    assert pick_gamma(0.1, two, gammas=(1, 2)).gamma == 1 and pick_gamma(0.5, two, gammas=(1, 2)).gamma == 2
    assert pick_gamma(0.5, CostProfile("one", "x", "-", "cpu", "float32", "eager", 1.0, 0.1, {1: 1.0})) is None


def test_alpha_comes_from_the_card_at_the_nearest_measured_temperature():
    folder = features_folder_of("SmolLM2-135M-Instruct")
    rows = json.loads((folder / "measures.json").read_text())["measures"]["acceptance"]
    by_t = {r["temperature"]: r["alpha"] for r in rows}
    assert sorted(by_t) == [0.0, 0.2, 1.0]   # greedy, the pair's own sampling, T = 1
    alpha, said = card_alpha(folder, 0.05)
    assert alpha == by_t[0.0] and said == "its card, greedy; this run samples at T = 0.05"
    assert card_alpha(folder, 0.5) == (by_t[0.2], "its card, T = 0.2; this run samples at T = 0.5")
    assert card_alpha(folder, 0.9) == (by_t[1.0], "its card, T = 1; this run samples at T = 0.9")
    assert card_alpha(folder, 0.0) == (by_t[0.0], "its card, greedy")
    assert card_alpha(folder, 0.2) == (by_t[0.2], "its card, T = 0.2")


@pytest.fixture
def profiles(tmp_path):
    path = tmp_path / "cost-profiles.json"
    entry = {"name": "real", "where": "this CPU", "when": "2026-11-27", "device": "cpu", "dtype": "float32",
             "engine": "eager", "target_step_ms": STEP, "draft_step_ms": 0.05 * STEP,
             "verify_ms_by_width": {str(w): ms for w, ms in CPU.verify_ms_by_width.items()}, "source": "bench",
             "pair": REAL, "drafter": "features"}
    general = dict(entry, name="general", pair="", drafter="")   # a device's profile, no pair's own
    path.write_text(json.dumps([general, entry]))
    return path


def test_a_pair_gets_a_pick_only_where_its_own_profile_and_card_were_measured(profiles):
    pick = gamma_for(REAL, "features", 0.2, "cpu", path=profiles)
    assert pick is not None and pick.gamma == 1 and pick.profile.name == "real"
    assert committed_profile(REAL, "features", "cpu", path=profiles).name == "real"
    assert gamma_for(REAL, "features", 0.2, "cuda", path=profiles) is None        # a CPU's costs: not a GPU's
    assert gamma_for(REAL, "features", 0.2, "cpu", "bfloat16", path=profiles) is None
    assert gamma_for(REAL, "ngram", 0.2, "cpu", path=profiles) is None            # no card with its α
    assert gamma_for("bundled", "features", 0.2, "cpu", path=profiles) is None    # no profile of its own
    assert gamma_for(REAL, "features", 0.2, "cpu", path=profiles.parent / "missing.json") is None


def test_the_committed_profiles_read_as_before_with_their_pair_named_where_they_have_one():
    from specdec.explain.gamma import PROFILES
    from specdec.explain.speed import profiles_from_json

    read = profiles_from_json(json.loads(PROFILES.read_text()))
    assert read and all(p.pair in ("", "bundled", REAL) for p in read)
    # A drafter only with a pair (γ is picked from those); a pair alone names whose costs a device's are.
    assert all(p.drafter in ("", "features") and (p.pair or not p.drafter) for p in read)
    assert [(p.name, p.dtype) for p in read if p.drafter] == [
        ("this CPU, SmolLM2-135M-Instruct + features drafter, bench (every width)", "float32"),
        ("2-core AMD EPYC, SmolLM2-135M-Instruct + features drafter, bfloat16 batch-invariant, 2 threads", "bfloat16")]


def test_picking_a_pair_moves_gamma_to_its_pick_and_back_but_keeps_a_gamma_the_visitor_set(profiles, monkeypatch):
    """The page's rule (`pair_words.follow_gamma`), as for sampling: γ follows the pair where it held a
    pair's own (the usual 4, or a pick), and stays where the visitor set it; each said in words."""
    import specdec.explain.gamma as gamma_module
    from specdec.app.page.pair_words import follow_gamma

    monkeypatch.setattr(gamma_module, "PROFILES", profiles)
    value, said = follow_gamma(REAL, "features", 4, 0.2, "cpu", "float32")   # loaded in float32
    assert value == 1 and said.startswith("γ: 4 → 1. γ 1 picked for this pair and drafter")
    value, said = follow_gamma("bundled", "model", 1, 1.0, "cpu")                 # back: the usual γ
    assert value == 4 and said == "γ: 1 → 4. "
    value, said = follow_gamma(REAL, "features", 7, 0.2, "cpu", "float32")        # the visitor's own
    assert value == {"__type__": "update"} and said.startswith("γ kept as you set it (7). γ 1 picked")
    assert follow_gamma(REAL, "features", 4, 0.2, "cuda") == (4, "")              # nothing measured there


def test_a_gamma_the_page_picked_follows_the_next_pair_after_the_visitor_moved_the_temperature(tmp_path, monkeypatch):
    """The real pair picked at its own sampling (T 0.2) gets γ 2 from its card's α there; the visitor
    moves T to 1, where its α picks γ 1; back on the bundled pair, γ 2 is still the page's pick, not
    the visitor's: it returns to the usual 4. (It was kept "as you set it": the rule looked for the
    page's picks at the current T only. A test on the real pair met it with costs measured under load.)"""
    import specdec.explain.gamma as gamma_module
    from specdec.app.page.pair_words import follow_gamma
    from specdec.models.pair import PRESETS

    folder = features_folder_of(PRESETS[REAL].target)
    low, high = card_alpha(folder, 1.0)[0], card_alpha(folder, 0.2)[0]
    assert low < high   # the card: α falls from T 0.2 to T 1, so the best γ can fall with it
    # Costs where γ 2 ties γ 1 (within TIE, the smaller kept) halfway between the two α: v over 3
    # tokens from speedup(α, 2) (1 − TIE) = speedup(α, 1), at c 0.05 and v over 2 tokens 1.0.
    c, mid = 0.05, (low + high) / 2
    v3 = (1 - TIE) * (1 + mid + mid ** 2) * (c + 1.0) / (1 + mid) - 2 * c
    entry = {"name": "knife-edge", "where": "this CPU", "when": "2026-11-28", "device": "cpu", "dtype": "float32",
             "engine": "eager", "target_step_ms": STEP, "draft_step_ms": c * STEP,
             "verify_ms_by_width": {"1": STEP, "2": STEP, "3": v3 * STEP}, "source": "a test",
             "pair": REAL, "drafter": "features"}
    path = tmp_path / "cost-profiles.json"
    path.write_text(json.dumps([entry]))
    monkeypatch.setattr(gamma_module, "PROFILES", path)
    assert [gamma_for(REAL, "features", t, "cpu").gamma for t in (0.2, 1.0)] == [2, 1]
    value, said = follow_gamma(REAL, "features", 4, 0.2, "cpu", "float32")   # picked at its own sampling
    assert value == 2 and said.startswith("γ: 4 → 2. ")
    value, said = follow_gamma("bundled", "model", 2, 1.0, "cpu")   # T moved to 1, then the bundled pair
    assert value == 4 and said == "γ: 2 → 4. ", said


def test_a_compared_run_is_told_what_each_gamma_would_have_given_at_its_alpha(profiles, monkeypatch):
    import specdec.explain.gamma as gamma_module
    from specdec.explain.gamma import run_gamma_sentence

    monkeypatch.setattr(gamma_module, "PROFILES", profiles)
    models = {"target": "SmolLM2-135M-Instruct", "device": "cpu", "dtype": "float32"}
    said = run_gamma_sentence(0.42, 4, "features", models)
    each = ", ".join(f"γ {g} {x:.2f}×" for g, x in sorted(predictions(0.42, CPU).items()))
    assert said.startswith(f"At this run's α = 0.420, the costs measured for it on a CPU, 2026-11-27, eager, float32, "
                           f"predict {each}")
    assert "γ 1 would have been best, not this run's γ 4" in said
    assert "this run's γ 1 is the best for its α here" in run_gamma_sentence(0.42, 1, "features", models)
    assert run_gamma_sentence(0.42, 4, "features", dict(models, device="cuda:0")) == ""
    assert run_gamma_sentence(0.42, 4, "model", dict(models, target="specdec-target")) == ""


def test_the_clis_help_names_the_pick_the_committed_costs_make():
    """`generate --help` cannot ask this module (it loads no torch): its words are checked here."""
    from specdec.cli.main import DEFAULT_GAMMA, MEASURED_GAMMAS
    from specdec.core.settings import RunSettings

    pick = gamma_for(REAL, "features", 0.2, "cpu")
    assert pick is not None and MEASURED_GAMMAS == f"{REAL} {pick.gamma} on a CPU"
    assert DEFAULT_GAMMA == RunSettings().gamma
