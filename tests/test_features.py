"""The `features` drafter (EAGLE-style, specdec.drafting.features): exact whatever its weights, its cache rolls
back like a fresh one, and training unrolls it exactly as drafting runs it.

Most tests build a randomly initialised drafter in the test: exactness holds for any q, and a random
q is far from p, which gives the statistical checks their power."""

import json

import pytest
import torch

import bounds
from commands import in_process
from specdec import Rule, RunSettings, SamplingConfig, autoregressive_generate, speculative_generate
from specdec.cli.main import main
from specdec.core.sampling import logits_to_probs
from specdec.decoding.rounds import EagerRounds
from specdec.drafting import features as fx
from specdec.drafting.drafters import FeaturesDrafter
from specdec.models.pair import ModelPair
from specdec.training.bundled.features import unroll_mask, unrolled_outputs
from test_decoding import PROMPT, SIGNIFICANCE, gof_p_value, sampled
from tiny import tiny_pair

EPS = torch.finfo(torch.float32).eps


def random_net(target, seed: int = 0, scale: float = 1.0, layers: tuple[int, ...] = ()) -> fx.FeatureNet:
    """`layers`: the target's middle layers the net fuses, with a random (not zero) fusion."""
    torch.manual_seed(seed)
    net = fx.FeatureNet(fx.layer_config(target.config, feature_layers=layers))
    with torch.no_grad():
        if layers:
            net.fuse.weight.normal_(0, 0.5 / net.fuse.weight.shape[1] ** 0.5)
        for p in net.parameters():
            p.mul_(scale)
    return net.eval()


def features_pair(pair, seed: int = 0, layers: tuple[int, ...] = ()) -> ModelPair:
    """A pair sharing `pair`'s models (never modifying a shared fixture) with a random drafter."""
    new = ModelPair(pair.tokenizer, pair.target, pair.draft, pair.target_name, pair.draft_name)
    new.feature_net = random_net(pair.target, seed, layers=layers)
    return new


# A fused net's tests run on the tiny target (2 layers: its one middle layer) and the bundled one.
FUSED = [(), (1,)]


def test_forward_with_features_gives_the_models_own_logits():
    pair = tiny_pair(vocab=16, seed=3)
    ids = torch.tensor([[1, 5, 2, 9, 4]])
    with torch.no_grad():
        logits, hidden = fx.forward_with_features(pair.target, ids, None)
        ref = pair.target(ids).logits
    assert hidden.shape == (1, 5, pair.target.config.hidden_size)
    # the same operations in the same order: equal to float32 rounding of the largest logit
    assert (logits - ref).abs().max() <= 8 * EPS * ref.abs().max()


def test_the_unroll_mask_is_what_drafting_step_j_sees():
    m = unroll_mask(4, 3)[0, 0]
    # copy 3 at element 3: the exact elements 0..1, copy 2 at element 2, itself
    row = m[2 * 4 + 3].view(3, 4)
    assert row.tolist() == [[True, True, False, False], [False, False, True, False], [False, False, False, True]]
    assert m[:4, :4].equal(torch.tril(torch.ones(4, 4, dtype=torch.bool)))   # copy 1: plain causal
    assert not m[:4, 4:].any()


@pytest.mark.parametrize("layers", FUSED)
def test_training_unroll_equals_drafting_step_by_step(layers):
    """The features of steps 1..3 in training's unrolled pass equal the drafter's at test time,
    fed the same tokens (so what training optimises is what drafting runs)."""
    pair = tiny_pair(vocab=16, seed=1)
    net = random_net(pair.target, seed=4, layers=layers)
    ids = torch.randint(0, 16, (1, 14), generator=torch.Generator().manual_seed(0))
    c = 8   # the drafter's context: ids[:c]; drafts ids[c], ids[c + 1] are fed back as at test time
    with torch.no_grad():
        _, feats = fx.forward_with_features(pair.target, ids, None, layers)
        outs = unrolled_outputs(net, pair.target, ids, feats, 3)
        d = FeaturesDrafter(net, pair.target, 16)
        d.observe(0, feats[0, :c - 1])
        g = d.norm(d._catch_up(ids[0, :c].tolist()))
        steps = [g[0]]
        for j in range(2):   # as `propose` feeds its drafts back
            g = d.norm(d.forward(g, d.embed(ids[0, c + j:c + j + 1]), c - 1 + j, d.cache))
            steps.append(g[0])
    scale = max(s.abs().max() for s in steps)
    for j, s in enumerate(steps):
        assert (s - outs[j][0, c - 2 + j]).abs().max() <= 64 * EPS * scale, f"step {j + 1}"


def gqa_config():
    """A target config whose heads share keys and values (4 query heads, 2 key-value heads)."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


@pytest.mark.parametrize("config", ["tiny", "gqa"])
def test_the_lean_forward_is_the_nets_own_layer(config):
    """`LeanForward` (what the eager drafter runs) equals `FeatureNet.forward` (transformers' layer,
    what training runs) over a growing cache: a catch-up of several elements, then one at a time."""
    from transformers import DynamicCache

    target_config = tiny_pair(vocab=16, seed=1).target.config if config == "tiny" else gqa_config()
    torch.manual_seed(7)
    net = fx.FeatureNet(fx.layer_config(target_config))
    with torch.no_grad():   # norm weights away from their initial ones, so a dropped one shows
        for norm in (net.layer.input_layernorm, net.layer.post_attention_layernorm):
            norm.weight.uniform_(0.5, 1.5)
    net.eval()
    d, lean = net.config.hidden_size, fx.LeanForward(net)
    ours, theirs = DynamicCache(config=net.config), DynamicCache(config=net.config)
    feats, embeds = torch.randn(12, d), torch.randn(12, d)
    start = 0
    with torch.no_grad():
        for n in (5, 3, 1, 1, 2):
            got = lean(feats[start:start + n], embeds[start:start + n], start, ours)
            pos = torch.arange(start, start + n)[None]
            want = net(feats[None, start:start + n], embeds[None, start:start + n], pos,
                       fx.causal_mask(n, start), theirs)[0]
            # the longest sum in the layer: the MLP's down projection (or fc's 2d inputs)
            tol = bounds.rounding(max(net.config.intermediate_size, 2 * d), scale=float(want.abs().max()))
            assert (got - want).abs().max() <= tol, (start, n)
            if start == 0:   # negative control: the last element one position late (a rotary off by one)
                late = pos.clone()
                late[0, -1] += 1
                shifted = net(feats[None, :n], embeds[None, :n], late, fx.causal_mask(n, 0),
                              DynamicCache(config=net.config))[0]
                assert (got - shifted).abs().max() > tol
            start += n
        assert ours.get_seq_length() == theirs.get_seq_length() == start


@pytest.mark.parametrize("layers", FUSED)
@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_equals_target_generate_tiny(gamma, layers):
    pair = features_pair(tiny_pair(vocab=16, seed=1), layers=layers)
    ref = pair.target.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=30, min_new_tokens=30)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=gamma, max_new_tokens=30, drafter="features",
                                                         sampling=SamplingConfig(temperature=0)))
    assert gen.token_ids == ref[0, len(PROMPT):].tolist()
    assert gen.stats.tested > 0
    assert gen.rounds[0].positions == []   # the first round has no features yet: it is the prefill


@pytest.mark.parametrize("gamma, layers", [(1, ()), (4, ()), (4, (4, 8, 12))])
def test_greedy_equals_target_generate_bundled(bundled, gamma, layers):
    pair = features_pair(bundled, layers=layers)
    prompt = "KING HENRY.\nNow, lords, the day is ours; the French are fled,"
    ids = bundled.tokenizer(prompt, return_tensors="pt")["input_ids"]
    ref = bundled.target.generate(ids, do_sample=False, max_new_tokens=40)
    gen = speculative_generate(pair, prompt, RunSettings(gamma=gamma, max_new_tokens=40, drafter="features",
                                                         sampling=SamplingConfig(temperature=0)))
    assert gen.token_ids == ref[0, ids.shape[1]:].tolist()


@pytest.mark.parametrize("layers", FUSED)
def test_after_rejections_the_cache_and_q_equal_a_fresh_drafters(layers):
    """Run rounds with rejections (a random drafter at T = 1), then compare the drafter with a fresh
    one that saw only the final context and the target's uncached features: same cache, same q."""
    pair = features_pair(tiny_pair(vocab=16, seed=2), seed=5, layers=layers)
    settings = RunSettings(gamma=4, max_new_tokens=40, drafter="features", sampling=SamplingConfig(temperature=1.0))
    rounds = EagerRounds(pair, settings)
    context, generator, rejected = list(PROMPT), torch.Generator().manual_seed(0), 0
    for _ in range(8):
        step = rounds.run(context, 4, settings, generator, None)
        rejected += step.n_accepted < len(step.drafts)
        context += step.kept()
    assert rejected >= 2
    used = rounds.drafter
    with torch.no_grad():
        _, feats = fx.forward_with_features(pair.target, torch.tensor([context]), None, layers)
    fresh = FeaturesDrafter(pair.feature_net, pair.target, 16)
    fresh.observe(0, feats[0, :-1])
    assert (used.feats - fresh.feats).abs().max() <= 64 * EPS * feats.abs().max()
    drafts, q = {}, {}
    for name, d in (("used", used), ("fresh", fresh)):
        drafts[name], q[name] = d.propose(context, 3, settings.sampling, torch.Generator().manual_seed(9))
        assert d.cache.get_seq_length() == len(context) - 1 == len(d.ids)   # the drafted elements are gone
    k_used, k_fresh = used.cache.layers[0].keys, fresh.cache.layers[0].keys
    assert (k_used - k_fresh).abs().max() <= 256 * EPS * k_fresh.abs().max()
    assert drafts["used"] == drafts["fresh"]
    assert (q["used"] - q["fresh"]).abs().max() <= 256 * EPS


def test_q_is_processed_like_p():
    pair = features_pair(tiny_pair(vocab=16, seed=1))
    sampling = SamplingConfig(temperature=0.7, top_k=5, top_p=0.9)
    d = FeaturesDrafter(pair.feature_net, pair.target, 16)
    with torch.no_grad():
        _, feats = fx.forward_with_features(pair.target, torch.tensor([PROMPT]), None)
    d.observe(0, feats[0])
    drafts, q = d.propose(PROMPT, 1, sampling, torch.Generator().manual_seed(0))
    with torch.no_grad():
        g = d.norm(d._catch_up(PROMPT))
        ref = logits_to_probs(d.head(g), sampling)
    # the second pass re-feeds the last element against the cache: equal to float32 rounding
    assert (q[0] - ref).abs().max() <= 64 * EPS
    assert ((q[0] > 0) == (ref > 0)).all() and (q[0] > 0).sum() <= 5


def test_a_pair_without_weights_gets_a_clear_message():
    pair = tiny_pair(vocab=16)
    with pytest.raises(ValueError, match="only for the bundled pair"):
        speculative_generate(pair, PROMPT, RunSettings(drafter="features", max_new_tokens=4))


@pytest.mark.parametrize("layers", FUSED)
def test_saved_weights_load_back_in_half_precision(tmp_path, layers):
    pair = tiny_pair(vocab=16, seed=1)
    net = random_net(pair.target, seed=2, layers=layers)
    fx.save(net, tmp_path / fx.FOLDER)
    back = fx.load(tmp_path / fx.FOLDER, pair.target)
    assert back.feature_layers == layers
    for (k, a), (_, b) in zip(net.state_dict().items(), back.state_dict().items()):
        assert b.equal(a.half().float()), k


def test_a_fusion_at_zero_drafts_exactly_as_the_net_without_it():
    """Why a fused net can start from a trained one: with the fusion at zero (its initialisation)
    it gives the same drafts and q, whatever the middle layers hold."""
    pair = tiny_pair(vocab=16, seed=3)
    plain = random_net(pair.target, seed=6)
    fused = fx.FeatureNet(fx.layer_config(pair.target.config, feature_layers=(1,))).eval()
    assert not fused.fuse.weight.any()
    fused.load_state_dict(plain.state_dict(), strict=False)
    sampling = SamplingConfig(temperature=1.0)
    out = {}
    for name, net in (("plain", plain), ("fused", fused)):
        d = FeaturesDrafter(net, pair.target, 16)
        with torch.no_grad():
            _, rows = fx.forward_with_features(pair.target, torch.tensor([PROMPT]), None, net.feature_layers)
        d.observe(0, rows[0, :-1])
        out[name] = d.propose(PROMPT, 4, sampling, torch.Generator().manual_seed(2))
    assert out["plain"][0] == out["fused"][0]
    assert out["plain"][1].equal(out["fused"][1])


def test_a_net_reading_a_layer_the_target_lacks_is_refused(tmp_path):
    pair = tiny_pair(vocab=16, seed=1)
    with pytest.raises(ValueError, match="feature layers must lie among the target's 1..1"):
        fx.layer_config(pair.target.config, feature_layers=(2,))
    net = random_net(pair.target, seed=2, layers=(1,))
    net.config.feature_layers = [5]
    fx.save(net, tmp_path / fx.FOLDER)
    with pytest.raises(ValueError, match="reads the target's layers"):
        fx.load(tmp_path / fx.FOLDER, pair.target)


# ---------------------------------------------------------------- the law of the output

# Sized to its power as test_decoding's RUNS (scripts/control_power.py): the skip control's
# chi-square at 2,000 runs was 367 on 62 degrees of freedom (noncentrality ~305, so ~152 at 1,000):
# at 1,000 runs the control fails with probability 1 - 4e-7, and a bias 0.57 the size of skipping
# the adjustment (noncentrality >= 87) is caught with probability 0.99 at SIGNIFICANCE.
RUNS = 1000


def exact_joint_2_3(pair, prompt, sampling) -> torch.Tensor:
    """P(t2, t3) from the target alone, uncached: tokens 2 and 3 are the ones the features drafter's
    first drafting round decides (round one drafts nothing: it is the prompt's prefill)."""
    v = pair.vocab_size

    def probs(ids):
        return logits_to_probs(pair.target(torch.tensor([ids])).logits[0, -1], sampling)

    joint = torch.zeros(v, v)
    with torch.no_grad():
        p1 = probs(prompt)
        for a in range(v):
            p2 = probs(prompt + [a])
            rows = torch.stack([probs(prompt + [a, b]) for b in range(v)])
            joint += p1[a] * p2[:, None] * rows
    return joint


def tokens_2_3(gen) -> int:
    return gen.token_ids[1] * 8 + gen.token_ids[2]


def drafted_2_3(traced) -> None:
    assert len(traced.rounds[1].positions) == 2   # tokens 2 and 3 came out of a drafting round


@pytest.fixture(scope="module")
def joint_setup():
    pair = features_pair(tiny_pair(vocab=8, seed=0), seed=1)
    sampling = SamplingConfig(temperature=1.0)
    return pair, sampling, exact_joint_2_3(pair, PROMPT, sampling)


@pytest.mark.slow
def test_joint_of_the_drafted_tokens_matches_the_target(joint_setup):
    # A drafter fusing middle layers changes only where q comes from; the law holds for any q the
    # drafter really drafted from (test_after_rejections_... and the engine tests check that q).
    pair, sampling, joint = joint_setup
    settings = RunSettings(gamma=2, max_new_tokens=4, sampling=sampling, drafter="features")
    spec = sampled(pair, settings, RUNS, check=drafted_2_3)
    assert gof_p_value([tokens_2_3(g) for g in spec], joint) > SIGNIFICANCE
    ar = [tokens_2_3(autoregressive_generate(pair, PROMPT, settings.with_(seed=10**6 + s))) for s in range(RUNS)]
    assert gof_p_value(ar, joint) > SIGNIFICANCE


@pytest.mark.slow
def test_negative_control_skip_adjustment_is_detected(joint_setup):
    pair, sampling, joint = joint_setup
    skip = RunSettings(gamma=2, max_new_tokens=4, sampling=sampling, drafter="features", rule=Rule.SKIP_ADJUSTMENT)
    samples = [tokens_2_3(g) for g in sampled(pair, skip, RUNS, check=drafted_2_3)]
    assert gof_p_value(samples, joint) < SIGNIFICANCE


# ---------------------------------------------------------------- the shipped drafter and the commands

def test_shipped_drafter_is_small_recorded_and_loads_offline(bundled):
    from specdec.models import manifest
    from specdec.models.pair import ASSETS

    folder = ASSETS / fx.FOLDER
    assert (folder / "model.safetensors").stat().st_size <= 5e6 and not list(folder.glob("*.bin"))
    assert manifest.differences(folder) == []   # covered by the pair's manifest
    net = fx.load(folder, bundled.target)
    assert net.fc.weight.shape == (128, 256)   # reads the bundled target's 128-wide features
    # trained: on a greedy run of the bundled pair it is accepted far more often than chance
    pair = ModelPair(bundled.tokenizer, bundled.target, bundled.draft, bundled.target_name, bundled.draft_name)
    pair.feature_net = net
    gen = speculative_generate(pair, "ROMEO.\nBut soft, what light", RunSettings(
        gamma=4, max_new_tokens=40, drafter="features", sampling=SamplingConfig(temperature=0)))
    assert gen.stats.accepted / gen.stats.tested > 0.5


@pytest.mark.slow
def test_generate_with_the_features_drafter_from_the_command_line(capsys):
    r = in_process(capsys, "generate", "--prompt", "ROMEO.", "--drafter", "features", "--max-new-tokens", "24",
                   "--seed", "0")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "drafter=features" in r.stdout and "acceptance rate alpha" in r.stdout


@pytest.mark.slow
def test_train_features_tiny_runs_and_resumes_to_the_same_weights(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(12):
        (corpus / f"work{i:02d}.txt").write_text("ROMEO.\nBut soft, what light?\nJULIET.\nO Romeo.\n" * (5 + i))
    out = tmp_path / "out"
    args = ("train", "--features", "--tiny", "--out", str(out), "--corpus-dir", str(corpus))
    # In this process (tests/commands.py): the real `python -m specdec train` and its exit status
    # are test_training's (its `trained` fixture); a subprocess here re-proved them for ~10 s of CPU.
    r = in_process(capsys, *args)
    assert r.returncode == 0, r.stderr[-2000:]
    weights = (out / fx.FOLDER / "model.safetensors").read_bytes()
    assert "features drafter trained" in r.stdout
    # Again: everything is checkpointed, nothing is redone.
    assert main(list(args)) == 0
    assert "resumed at step 4" in capsys.readouterr().out
    assert (out / fx.FOLDER / "model.safetensors").read_bytes() == weights
    # A fused drafter started from those weights: its pool gains the middle layers' rows, its fusion
    # starts at zero, and the saved net reads those layers.
    fused = tmp_path / "fused"
    r = in_process(capsys, "train", "--features", "--tiny", "--out", fused, "--corpus-dir", corpus,
                   "--feature-layers", "4,8,12", "--init-from", out / fx.FOLDER)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "new: ['fuse.weight']" in r.stdout
    assert (fused / ".features-work" / "pool-train-layers.pt").exists()
    config = json.loads((fused / fx.FOLDER / "config.json").read_text())
    assert config["feature_layers"] == [4, 8, 12] and "after layers [4, 8, 12]" in config["specdec"]["feature"]
    assert main(["train", "--features", "--tiny", "--out", str(fused), "--feature-layers", "4,x"]) == 2
    assert "like 4,8,12" in capsys.readouterr().err


def test_the_drafters_embedding_and_head_shortcuts_equal_the_modules():
    """A plain embedding is read as a view and a bias-free head as one product with its first rows;
    any other module (max_norm renormalises, a bias adds) is called: both equal the module's output."""
    from specdec.drafting.drafters import _row_lookup

    torch.manual_seed(0)
    feature = torch.randn(1, 6)
    for embed in (torch.nn.Embedding(10, 6), torch.nn.Embedding(10, 6, max_norm=0.5)):
        with torch.no_grad():   # ours first and copied: max_norm renormalises the weight in place
            got = _row_lookup(embed)(7).clone()
            assert got.equal(embed(torch.tensor([7])))
    for head in (torch.nn.Linear(6, 10, bias=False), torch.nn.Linear(6, 10, bias=True)):
        with torch.no_grad():
            got, want = fx.head_logits(head, 8)(feature), head(feature)[..., :8]
            some = fx.head_logits(head, 8, torch.tensor([6, 1, 3]))(feature)   # a vocabulary subset
        assert got.shape == some.shape == (1, 8)
        assert (got - want).abs().max() <= bounds.rounding(6, scale=float(want.abs().max()))
        inside = torch.tensor([1, 3, 6])
        assert (some[0, inside] - want[0, inside]).abs().max() <= bounds.rounding(6, scale=float(want.abs().max()))
        assert some[0, [0, 2, 4, 5, 7]].eq(-torch.inf).all()


def test_a_run_ending_between_evaluations_records_its_last_loss_as_strict_json(tmp_path):
    """A run that stops between evaluations (its time is up) evaluates once more: that row keeps
    the last step's loss, so its training.json is strict JSON (NaN is not), and the card's history
    shows a number; a record without one (null, or NaN in older records) reads "–"."""
    from specdec.training.bundled.features import FeaturesConfig, train_net
    from specdec.training.bundled.features_card import _history

    torch.manual_seed(0)
    net = torch.nn.Linear(2, 1)
    pools = {"train": {"ids": torch.randn(8, 2)}, "eval": {"ids": torch.randn(4, 2)}}
    losses = []

    def loss_fn(net, _target, batch, _cfg):
        loss = net(batch["ids"]).pow(2).mean()
        losses.append(loss.item())
        return loss, [0.5]

    cfg = FeaturesConfig(steps=10, batch_size=4, warmup=1, eval_every=100, checkpoint_every=100)
    state = train_net(net, None, pools, cfg, tmp_path / "ckpt.pt", log=lambda _s: None, progress=False,
                      loss_fn=loss_fn, eval_fn=lambda *_a: {"x": 1.0}, stop_at=3)
    last = state["history"][-1]
    assert (last["step"], last["loss"]) == (3, round(losses[-1], 4))
    json.loads(json.dumps(state["history"], allow_nan=False))
    rows = _history({"history": [last, {**last, "loss": None}, {**last, "loss": float("nan")}]}).splitlines()
    assert f"| 3 | {losses[-1]:.3f} |" in rows[2] and [r.split(" | ")[1] for r in rows[3:5]] == ["–", "–"]
    assert "Loss –" in rows[-1] and "Loss –" not in _history({"history": [last]})


@pytest.mark.parametrize("folder", ["specdec-features", "SmolLM2-135M-Instruct-features"])
def test_the_shipped_training_records_are_strict_json(folder):
    from pathlib import Path

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    text = (Path(__file__).parent.parent / "assets" / "models" / folder / "training.json").read_text()
    json.loads(text, parse_constant=refuse)
