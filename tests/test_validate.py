"""Imported traces are checked before use: one test per class of bad trace, each asserting the
message names the first thing wrong. Real traces of every kind pass."""

from __future__ import annotations

import copy
import json

import pytest

from specdec.app.server import limits
from specdec.core.sampling import Rule, SamplingConfig
from specdec.core.settings import RunSettings
from specdec.decoding.loop import speculative_generate
from specdec.trace.validate import ImportLimits, check_trace, json_depth, load_json, load_trace, read_trace_file

PROMPT = "To be, or not to be"


@pytest.fixture(scope="module")
def good(bundled) -> dict:
    """A real exported trace (T = 1, gamma = 4) with at least one rejection and one accepted draft
    that could have been rejected (p/q < 0.99), as a dict."""
    for seed in range(20):
        gen = speculative_generate(bundled, PROMPT, RunSettings(gamma=4, max_new_tokens=32, seed=seed))
        if any(r.n_accepted < len(r.positions) for r in gen.rounds) and any(
                pos.ratio < 0.99 for r in gen.rounds for pos in r.positions[:r.n_accepted]):
            return json.loads(gen.to_json())
    raise AssertionError("no run with both an accepted and a rejected draft")


def bad(good: dict, change) -> dict:
    d = copy.deepcopy(good)
    change(d)
    return d


def refused(d: dict, *fragments: str, lim: ImportLimits | None = None) -> str:
    with pytest.raises(ValueError) as err:
        check_trace(d, lim)
    msg = str(err.value)
    for f in fragments:
        assert f in msg, msg
    return msg


def first_rejected(d: dict) -> tuple[int, int]:
    for k, r in enumerate(d["rounds"]):
        if r["n_accepted"] < len(r["positions"]):
            return k, r["n_accepted"]
    raise AssertionError("no rejection")


def first_accepted(d: dict) -> tuple[int, int]:
    """The first accepted draft that could have been rejected (p/q < 1: a u near 1 contradicts it)."""
    return next((k, i) for k, r in enumerate(d["rounds"]) for i, pos in enumerate(r["positions"][:r["n_accepted"]])
                if pos["ratio"] < 0.99)


# ---------------------------------------------------------------- real traces pass

KINDS = {
    "default": dict(),
    "greedy": dict(gamma=8, sampling=SamplingConfig(0.0)),
    "skip adjustment": dict(rule=Rule.SKIP_ADJUSTMENT),
    "ngram drafter": dict(drafter="ngram", gamma=6),
    "top-k and top-p": dict(sampling=SamplingConfig(1.0, top_k=5, top_p=0.8)),
    "gamma 16, hot": dict(gamma=16, sampling=SamplingConfig(1.5)),
    "greedy match rule": dict(rule=Rule.GREEDY_MATCH, gamma=6),
    "features drafter": dict(drafter="features"),
}


@pytest.mark.parametrize("kw", KINDS.values(), ids=KINDS.keys())
def test_real_traces_of_every_kind_pass(bundled, kw):
    gen = speculative_generate(bundled, PROMPT, RunSettings(**{"max_new_tokens": 48, **kw}))
    check_trace(load_json(gen.to_json()))


def _calls(text: str) -> int:
    """Python and builtin calls made to parse and check a trace: its work, counted, not timed."""
    import sys

    count = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profile)
    try:
        check_trace(load_json(text))
    finally:
        sys.setprofile(None)
    return count[0]


def test_the_validators_work_grows_linearly_with_the_trace(bundled):
    """A 200-token run at γ 16 (2.5 MB, the largest kind of trace) costs the validator the same
    work per byte as a 50-token one (0.5 MB): counted calls, so no machine's speed enters. Measured:
    0.49 calls a byte at both sizes. Any part of the work that grew with the square of the size
    and was 6 % of it at 50 tokens would make the 200-token trace's work per byte 1.25× (the size
    ratio is 4.7), and fail here."""
    per_byte = []
    for tokens in (50, 200):
        gen = speculative_generate(bundled, PROMPT, RunSettings(gamma=16, max_new_tokens=tokens,
                                                                sampling=SamplingConfig(1.5)))
        text = gen.to_json()
        per_byte.append(_calls(text) / len(text))
    assert per_byte[1] < 1.25 * per_byte[0], per_byte


# ---------------------------------------------------------------- bytes, depth and JSON

def test_not_json():
    with pytest.raises(ValueError, match="not valid JSON"):
        load_json("{not json")


def test_too_big_is_refused_before_parsing(tmp_path):
    """The library names the bound by its argument; a server's limits name its variable."""
    with pytest.raises(ValueError, match=r"traces are imported up to 1\.0 kB here \(max_bytes\)"):
        load_json("[" + "0," * 2000 + "0]", ImportLimits(max_bytes=1000))
    served = ImportLimits(max_bytes=1000, names={"max_bytes": "SPECDEC_MAX_UPLOAD_MB"})
    with pytest.raises(ValueError, match=r"up to 1\.0 kB here \(SPECDEC_MAX_UPLOAD_MB\)"):
        load_json("[" + "0," * 2000 + "0]", served)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 5000)
    with pytest.raises(ValueError, match="the file is 5.0 kB"):
        read_trace_file(big, ImportLimits(max_bytes=1000))


def test_deep_nesting_is_refused_without_recursion():
    """Refused by a count, before any parse: under a recursion limit of 200 frames (pytest's own
    take some), a parser that recursed into the nesting would raise RecursionError instead."""
    import sys

    text = "[" * 100_000 + "]" * 100_000
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(200, len(__import__("inspect").stack()) + 60))
    try:
        with pytest.raises(ValueError, match="nested 100000 levels deep"):
            load_json(text)
    finally:
        sys.setrecursionlimit(limit)
    assert json_depth('{"a": "[[[[[[", "b": [[1]]}') == 3   # brackets inside strings do not count


def test_not_an_object():
    with pytest.raises(ValueError, match="expected a JSON object, got a JSON array"):
        load_json("[1, 2]")


def test_wrong_schema(good):
    refused(bad(good, lambda d: d.update(schema="something.else")), "not a specdec trace", "'something.else'")


def test_version_as_text_is_named_as_text(good):
    msg = refused(bad(good, lambda d: d.update(version="1")), "version is the string '1'", "not text")
    assert "version 1 is not supported" not in msg


def test_unknown_version(good):
    refused(bad(good, lambda d: d.update(version=99)), "version is 99", "reads trace versions 1 and 2")


# ---------------------------------------------------------------- schema and types

def test_missing_field(good):
    refused(bad(good, lambda d: d.pop("rounds")), "has no 'rounds'")


def test_wrong_type(good):
    refused(bad(good, lambda d: d.update(rounds="many")), "rounds is 'many': expected a list")
    refused(bad(good, lambda d: d["rounds"][0].update(n_accepted="2")), "rounds[0].n_accepted is '2'")


def test_unknown_nested_field(good):
    refused(bad(good, lambda d: d["rounds"][0].update(extra={"deep": [1]})), "rounds[0].extra is not a field")


def test_the_features_drafters_layers_are_layer_numbers(good):
    check_trace(bad(good, lambda d: d["models"].update(feature_layers=[4, 8, 12])))
    refused(bad(good, lambda d: d["models"].update(feature_layers=[4, "x"])), "models.feature_layers[1]")
    refused(bad(good, lambda d: d["models"].update(feature_layers=[0])), "models.feature_layers[0]")
    refused(bad(good, lambda d: d["models"].update(feature_layers={"a": 1})), "models.feature_layers")


# ---------------------------------------------------------------- ranges

def test_token_id_out_of_vocabulary(good):
    vocab = good["models"]["vocab_size"]
    refused(bad(good, lambda d: d["token_ids"].__setitem__(0, vocab)), "token_ids[0]",
            f"from 0 to {vocab - 1}")
    refused(bad(good, lambda d: d["rounds"][0]["positions"][0]["p"]["ids"].__setitem__(0, -1)),
            "rounds[0].positions[0].p.ids[0] is -1")


def test_negative_probability(good):
    refused(bad(good, lambda d: d["rounds"][0]["positions"][0]["p"]["probs"].__setitem__(1, -0.2)),
            "rounds[0].positions[0].p.probs[1] is -0.2", "a probability must be a finite number from 0 to 1")


def test_nan_probability(good):
    refused(bad(good, lambda d: d["rounds"][0]["end_dist"]["probs"].__setitem__(0, float("nan"))),
            "rounds[0].end_dist.probs[0] is NaN")


def test_probability_above_one(good):
    refused(bad(good, lambda d: d["rounds"][0]["positions"][0].update(u=1.5)), "rounds[0].positions[0].u is 1.5")


def test_the_mass_where_q_is_0_is_a_probability_and_may_be_absent(good):
    assert good["rounds"][0]["positions"][0]["p_where_q_is_0"] is not None   # every new trace stores it
    refused(bad(good, lambda d: d["rounds"][0]["positions"][0].update(p_where_q_is_0=1.5)),
            "rounds[0].positions[0].p_where_q_is_0 is 1.5")
    older = bad(good, lambda d: [pos.pop("p_where_q_is_0") for r in d["rounds"] for pos in r["positions"]])
    check_trace(older)   # a trace from before it was stored
    assert load_trace(older).rounds[0].positions[0].p_where_q_is_0 is None


def test_the_ids_outside_a_drafters_vocabulary_are_stored_ids_and_not_the_draft(good):
    pos = good["rounds"][0]["positions"][0]
    other = next(i for i in pos["p"]["ids"] if i != pos["draft_token"])
    check_trace(bad(good, lambda d: d["rounds"][0]["positions"][0].update(outside_ids=[other])))
    unstored = max(pos["p"]["ids"]) + 1
    refused(bad(good, lambda d: d["rounds"][0]["positions"][0].update(outside_ids=[unstored])),
            "rounds[0].positions[0].outside_ids[0]", "is not among the stored ids")
    refused(bad(good, lambda d: d["rounds"][0]["positions"][0].update(outside_ids=[pos["draft_token"]])),
            "rounds[0].positions[0].outside_ids[0]", "is the drafted token")
    refused(bad(good, lambda d: d["rounds"][0]["positions"][0].update(outside_ids="all")),
            "rounds[0].positions[0].outside_ids", "expected a list")


def test_masses_must_add_up(good):
    def halve(d):
        dist = d["rounds"][0]["positions"][0]["q"]
        dist["probs"] = [x / 2 for x in dist["probs"]]
    refused(bad(good, halve), "rounds[0].positions[0].q adds up to", "a distribution adds up to 1")


def test_n_accepted_above_gamma(good):
    refused(bad(good, lambda d: d["rounds"][0].update(n_accepted=10**9)),
            "rounds[0].n_accepted is 1000000000", "at most the round's gamma")


def test_rounds_over_the_limit(good, monkeypatch):
    refused(good, "has", "at most 3 here (max_tokens)", lim=ImportLimits(max_tokens=3))
    monkeypatch.setattr(limits, "MAX_NEW_TOKENS", 3)   # the server's limits, read when the import comes
    refused(good, "has", "at most 3 here (SPECDEC_MAX_NEW_TOKENS)", lim=limits.import_limits())


def test_prompt_over_the_limit(good, monkeypatch):
    monkeypatch.setattr(limits, "MAX_PROMPT_TOKENS", 2)
    refused(good, "prompt_ids has", "at most 2 here (SPECDEC_MAX_PROMPT_TOKENS)", lim=limits.import_limits())


def test_bad_settings(good):
    refused(bad(good, lambda d: d["settings"].update(rule="bogus")), "settings.rule is 'bogus'")
    refused(bad(good, lambda d: d["settings"].update(gamma=0)), "settings are not valid", "gamma")


# ---------------------------------------------------------------- tampered numbers are refused, not drawn

def test_tampered_status(good):
    k, i = first_rejected(good)
    refused(bad(good, lambda d: d["rounds"][k]["positions"][i].update(status="accepted")),
            f"rounds[{k}].positions[{i}].status is 'accepted'", "'rejected'")


def test_tampered_uniform(good):
    k, i = first_accepted(good)
    refused(bad(good, lambda d: d["rounds"][k]["positions"][i].update(u=0.999999)),
            f"rounds[{k}].positions[{i}] is accepted", "say otherwise")


def test_tampered_draft_probability(good):
    def change(d):
        pos = d["rounds"][0]["positions"][0]
        pos["p_draft"] = min(1.0, pos["p_draft"] + 0.3)
    refused(bad(good, change), "rounds[0].positions[0].p_draft", "but p stores")


def test_tampered_beta(good):
    refused(bad(good, lambda d: d["rounds"][0]["positions"][0].update(beta=0.0 if
            d["rounds"][0]["positions"][0]["beta"] > 0.5 else 1.0)), "rounds[0].positions[0].beta", "sum(min(p, q))")


def test_tampered_emitted_tokens(good):
    k, _ = first_rejected(good)
    def change(d):
        d["rounds"][k]["emitted"][-1] = (d["rounds"][k]["emitted"][-1] + 1) % 100
    refused(bad(good, change), f"rounds[{k}].emitted")


def test_tampered_token_ids(good):
    def change(d):
        d["token_ids"][-1] = (d["token_ids"][-1] + 1) % 100
    refused(bad(good, change), "token_ids differ from the tokens the rounds emitted")


def test_tampered_stats(good):
    refused(bad(good, lambda d: d["stats"].update(accepted=d["stats"]["accepted"] + 5)),
            "stats.accepted is", "but the trace holds")
    refused(bad(good, lambda d: d["stats"].update(acceptance_rate=5.0)), "stats.acceptance_rate is 5.0")


def test_notes_must_name_rounds(good):
    refused(bad(good, lambda d: d.update(notes={"9999": "hi"})), "notes has the key '9999'")


def test_end_token_must_have_mass(good):
    def change(d):
        r = d["rounds"][0]
        j = r["end_dist"]["ids"].index(r["end_token"])
        moved = r["end_dist"]["probs"][j]
        r["end_dist"]["probs"][j] = 0.0
        r["end_dist"]["rest"] += moved
        if r["end_dist"].get("split"):
            r["end_dist"]["split"][0] += moved
    refused(bad(good, change), "rounds[0].end_token", "probability 0")


def test_message_names_only_the_first_problem(good):
    def change(d):
        d["rounds"][0]["n_accepted"] = -1
        d["rounds"][1]["n_accepted"] = -2
    msg = refused(bad(good, change), "rounds[0].n_accepted is -1")
    assert "rounds[1]" not in msg


def test_the_servers_import_limits_are_the_documented_ones():
    served = limits.import_limits()
    assert served.max_depth == limits.MAX_JSON_DEPTH and served.max_bytes == limits.MAX_UPLOAD_BYTES
    assert served.max_tokens == limits.MAX_NEW_TOKENS and served.name("max_bytes") == "SPECDEC_MAX_UPLOAD_MB"
    assert ImportLimits().max_depth == limits.MAX_JSON_DEPTH   # a real trace nests 5 deep: 16 either way
    assert "SPECDEC_MAX_UPLOAD_MB" in limits.__doc__ and "SPECDEC_MAX_PAIRS" in limits.__doc__


def as_version_1(d: dict) -> dict:
    """A schema-1 trace: `end_rule` ("target" for the biased ending), no tail split, no newer fields."""
    d = copy.deepcopy(d)
    d["version"] = 1
    for key in ("title", "notes"):
        d.pop(key, None)
    for r in d["rounds"]:
        ending = r.pop("ending")
        r["end_rule"] = {"biased_p": "target", "plain": "bonus"}.get(ending, ending)
        dists = [r["end_dist"], r["end_p"], r["end_q"]] + [x for pos in r["positions"] for x in (pos["p"], pos["q"])]
        for dist in dists:
            if dist:
                dist.pop("split", None)
        for pos in r["positions"]:
            pos.pop("skip_tv", None)
    return d


def test_a_version_1_trace_passes(good):
    old = as_version_1(good)
    check_trace(old)
    assert len(load_trace(old).rounds) == len(good["rounds"])


def test_a_tampered_version_1_trace_is_refused(good):
    old = as_version_1(good)
    old["rounds"][0]["positions"][0]["p"]["probs"][0] = 7.0
    refused(old, "rounds[0].positions[0].p.probs[0] is 7.0")
