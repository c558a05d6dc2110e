"""The card's α on three kinds of prompt: read from chat-alpha's JSON for the weights the card describes."""

import hashlib
import json

import pytest

from specdec.training.chat import prompt_kinds as pk

SHIPPED, OTHER = "a" * 64, "b" * 64


def result(drafters: dict[str, str], entries: dict, tokens: int = 128) -> dict:
    """A chat-alpha result as its last JSON line holds it (keys "set, sampling[ | drafter]")."""
    return {"drafters": list(drafters), "sha256": drafters, "gamma": 4, "new_tokens": tokens, "prompts": {},
            "seeds": [0, 1], "seeded_apart": True} | entries


def entry(*per_prompt):
    return {"alpha": 0.0, "tested": 0, "per_prompt": [list(p) for p in per_prompt]}


def test_each_kind_pools_its_sets_for_the_drafter_whose_weights_it_names():
    two = result({"old": OTHER, "new": SHIPPED}, {
        "card, greedy | old": entry((9, 10)), "card, greedy | new": entry((3, 10), (5, 10)),
        "other, greedy | new": entry((2, 10)), "more, greedy | new": entry((0, 10)),
        "card, T = 1 | new": entry((1, 4))})
    one = result({"new": SHIPPED}, {"sharegpt, pair's": entry((6, 8)), "own, greedy": entry((7, 7))})
    kinds = pk.kinds_of([two, one], SHIPPED)
    table = kinds["table"]
    assert table["hand-written"]["greedy"] == {"alpha": 10 / 40, "tested": 40, "prompts": 4}   # old's 9/10 left out
    assert table["hand-written"]["T = 1"]["alpha"] == 0.25 and "pair's" not in table["hand-written"]
    assert table["ShareGPT, held out"] == {"pair's": {"alpha": 0.75, "tested": 8, "prompts": 1}}
    assert table["the model's own questions"]["greedy"]["alpha"] == 1.0
    assert (kinds["gamma"], kinds["new_tokens"], kinds["sha256"]) == (4, 128, SHIPPED)
    # A later result replaces an earlier one's set and sampling.
    again = result({"new": SHIPPED}, {"own, greedy": entry((1, 7))})
    assert pk.kinds_of([one, again], SHIPPED)["table"]["the model's own questions"]["greedy"]["alpha"] == 1 / 7
    section = pk.kinds_section(kinds)
    assert "| hand-written (4) | 0.250 (40 tested) | – | 0.250 (4 tested) |" in section
    assert "γ = 4, 128 new tokens" in section and "pool 2 seeds a prompt" in section
    four = result({"new": SHIPPED}, {"own, greedy": entry((1, 7))}) | {"seeds": [0, 1, 2, 3]}
    assert "pool 4 seeds a prompt" in pk.kinds_section(pk.kinds_of([four], SHIPPED))


def test_results_on_other_weights_or_settings_are_refused():
    other = result({"old": OTHER}, {"card, greedy": entry((9, 10))})
    with pytest.raises(ValueError, match="no chat-alpha result here measured"):
        pk.kinds_of([other], SHIPPED)
    no_sha = {k: v for k, v in result({"new": SHIPPED}, {"card, greedy": entry((1, 2))}).items() if k != "sha256"}
    with pytest.raises(ValueError, match="no chat-alpha result here measured"):   # results from before the sha256
        pk.kinds_of([no_sha], SHIPPED)
    # Sampled on one stream for every prompt: refused; its greedy rows alone (no random numbers) are kept.
    shared = result({"new": SHIPPED}, {"card, greedy": entry((1, 2)), "card, T = 1": entry((1, 4))})
    del shared["seeded_apart"]
    with pytest.raises(ValueError, match="same seed's random numbers"):
        pk.kinds_of([shared], SHIPPED)
    del shared["card, T = 1"]
    assert pk.kinds_of([shared], SHIPPED)["table"]["hand-written"]["greedy"]["alpha"] == 0.5
    short = result({"new": SHIPPED}, {"card, greedy": entry((1, 2))}, tokens=64)
    with pytest.raises(ValueError, match="different γ, new tokens or seeds a prompt"):
        pk.kinds_of([short, result({"new": SHIPPED}, {"own, greedy": entry((1, 2))})], SHIPPED)
    four = result({"new": SHIPPED}, {"card, T = 1": entry((1, 2))}) | {"seeds": [0, 1, 2, 3]}
    with pytest.raises(ValueError, match="different γ, new tokens or seeds a prompt"):
        pk.kinds_of([four, result({"new": SHIPPED}, {"own, T = 1": entry((1, 2))})], SHIPPED)


def test_the_card_keeps_a_saved_table_only_for_the_same_weights(tmp_path):
    from specdec.cli.chat_card import prompt_kinds

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    sha = hashlib.sha256(b"weights").hexdigest()
    assert pk.weights_sha256(tmp_path) == sha
    log = tmp_path / "alpha.log"
    log.write_text("  card, greedy: α 0.5\n" + json.dumps(result({"x": sha}, {"card, greedy": entry((1, 2))})) + "\n")
    kinds = prompt_kinds(tmp_path, [str(log)])
    assert kinds["table"]["hand-written"]["greedy"]["alpha"] == 0.5
    (tmp_path / "measures.json").write_text(json.dumps({"kinds": kinds}))
    assert prompt_kinds(tmp_path, None) == kinds
    (tmp_path / "model.safetensors").write_bytes(b"new weights")   # retrained: the old table no longer applies
    assert prompt_kinds(tmp_path, None) is None
    with pytest.raises(ValueError, match="no chat-alpha result"):
        prompt_kinds(tmp_path, [str(log)])
