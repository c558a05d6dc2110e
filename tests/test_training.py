"""The training command end to end on a tiny config, in a temporary folder (never the real recipe)."""

import json
from pathlib import Path

import pytest

import bounds
from commands import command, in_process
from specdec import RunSettings, SamplingConfig, autoregressive_generate, load_pair, speculative_generate
from specdec.cli.main import main
from specdec.models import manifest


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """`specdec train --tiny --out FOLDER` on a small corpus, the real command: (the finished
    process, FOLDER). The draft-only test goes on from this pair too (one tiny training run fewer).
    This file's other training runs call the command's `main` in process (tests/commands.py)."""
    tmp = tmp_path_factory.mktemp("trained")
    corpus = tmp / "corpus"
    corpus.mkdir()
    text = "ROMEO.\nBut soft, what light through yonder window breaks?\nJULIET.\nO Romeo, Romeo.\n"
    for i in range(12):   # whole "works": the split holds out every 10th
        (corpus / f"work{i:02d}.txt").write_text(text * (5 + i))
    out = tmp / "models"
    return command("train", "--tiny", "--out", str(out), "--corpus-dir", str(corpus), timeout=300), out


@pytest.mark.slow
def test_tiny_training_run_produces_a_loadable_pair(trained):
    r, out = trained
    assert r.returncode == 0, r.stderr[-2000:]
    assert "step 6/6" in r.stdout
    for name in ("specdec-target", "specdec-draft"):
        assert (out / name / "model.safetensors").exists() and (out / name / "README.md").exists()
        assert manifest.differences(out / name) == []   # recorded in out/manifest.json, which loading checks
    # The recipe learned something: each model's validation loss fell below its first evaluation.
    for name in ("specdec-target", "specdec-draft"):
        history = json.loads((out / name / "training.json").read_text())["history"]
        assert history[-1]["val_loss"] < history[0]["val_loss"] or len(history) == 1, (name, history)
    pair = load_pair(target=str(out / "specdec-target"), draft=str(out / "specdec-draft"), device="cpu")
    # The trained pair works as a pair: greedy speculative decoding gives the target's own tokens,
    # and the run's statistics count what its rounds hold.
    greedy = SamplingConfig(temperature=0)
    spec = speculative_generate(pair, "ROMEO.", RunSettings(gamma=3, max_new_tokens=10, sampling=greedy))
    alone = autoregressive_generate(pair, "ROMEO.", RunSettings(max_new_tokens=10, sampling=greedy))
    assert spec.token_ids == alone.token_ids and len(spec.token_ids) >= 1
    s = speculative_generate(pair, "ROMEO.", RunSettings(gamma=3, max_new_tokens=10, seed=0)).stats
    assert 0 < s.tested <= s.drafted and s.accepted == round(s.acceptance_rate * s.tested)


def _corpus(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for i in range(12):
        (folder / f"work{i:02d}.txt").write_text("ROMEO.\nBut soft, what light?\nJULIET.\nO Romeo.\n" * (5 + i))
    return folder


@pytest.mark.slow
def test_tiny_training_by_default_writes_a_new_folder_under_runs(tmp_path, capsys, monkeypatch):
    """`specdec train --tiny` as the README gives it (no --out): a new folder under ./runs/, never
    assets/models. (Run from a scratch folder: the defaults are relative to where it runs.)"""
    corpus = _corpus(tmp_path / "corpus")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = in_process(capsys, "train", "--tiny", "--no-card", "--corpus-dir", corpus)
    assert r.returncode == 0, r.stderr[-2000:]
    made = [p.relative_to(work) for p in work.rglob("model.safetensors")]
    assert len(made) == 2 and all(p.parts[0] == "runs" and p.parts[1].startswith("pair-") for p in made), made
    assert not (work / "assets").exists()
    assert f"--target {made[0].parent.parent / 'specdec-target'}" in r.stdout   # how to use it


def test_training_into_the_bundled_folder_takes_overwrite_bundled(tmp_path, monkeypatch, capsys):
    """The shipped pair is never overwritten by accident: --out naming it (or a folder inside it)
    is refused before anything is fetched or trained."""
    import specdec.training.bundled.recipe as recipe

    bundled = tmp_path / "assets" / "models"
    (bundled / "specdec-target").mkdir(parents=True)
    monkeypatch.setattr(recipe, "ASSETS", bundled)   # a stand-in: the real pair is never put at risk
    corpus = _corpus(tmp_path / "corpus")
    for out in (bundled, bundled / "specdec-target", bundled / "." / "specdec-target" / ".."):
        assert main(["train", "--tiny", "--no-card", "--out", str(out), "--corpus-dir", str(corpus)]) == 2
        err = capsys.readouterr().err
        assert "--overwrite-bundled" in err and len(err.strip().splitlines()) == 1, err
    assert main(["card", "--quick", "--out", str(bundled)]) == 2
    assert "--overwrite-bundled" in capsys.readouterr().err
    assert [p.name for p in bundled.rglob("*")] == ["specdec-target"]   # nothing written
    with pytest.raises(ValueError, match="overwrite-bundled"):
        recipe.train(recipe.tiny_config(str(bundled), str(corpus)))     # the library refuses too
    recipe.check_out_dir(bundled, overwrite_bundled=True)               # asked for: allowed


@pytest.mark.slow
def test_draft_only_keeps_the_target_and_writes_a_distilled_draft_with_its_record(trained, tmp_path, capsys):
    corpus = _corpus(tmp_path / "corpus")
    r, first = trained
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp_path / "second"
    r = in_process(capsys, "train", "--draft-only", "--tiny", "--compare-losses", "--source", first, "--out", out,
                   "--corpus-dir", corpus)
    assert r.returncode == 0, r.stderr[-2000:]
    target = "specdec-target/model.safetensors"
    assert (out / target).read_bytes() == (first / target).read_bytes()          # the target is unchanged
    assert (out / "specdec-draft/model.safetensors").read_bytes() != (first / "specdec-draft/model.safetensors"
                                                                       ).read_bytes()
    info = json.loads((out / "specdec-draft" / "training.json").read_text())["on_policy"]
    assert [row["loss"] for row in info["loss_comparison"]] == ["kl", "tv", "mix"]
    assert info["history"][-1]["step"] == 4 and info["pool_tokens"] > 0
    assert set(info["validation_text"]) == {"before", "after"}
    assert "on the target's own samples" in (out / "specdec-draft" / "README.md").read_text()
    assert manifest.differences(out / "specdec-draft") == [] and not (out / ".distill-work").exists()
    pair = load_pair(target=str(out / "specdec-target"), draft=str(out / "specdec-draft"), device="cpu")
    greedy = RunSettings(gamma=3, max_new_tokens=8, sampling=SamplingConfig(temperature=0))
    assert speculative_generate(pair, "ROMEO.", greedy).token_ids == autoregressive_generate(pair, "ROMEO.",
                                                                                              greedy).token_ids


def test_distillation_losses_are_zero_only_where_the_draft_matches_and_tv_is_one_minus_beta():
    import torch

    from specdec.training.bundled.distill import divergences, loss_of, position_mask

    torch.manual_seed(0)
    teacher = torch.log_softmax(torch.randn(2, 5, 11), -1)
    temps = torch.tensor([1.0, 0.7])
    same = divergences(teacher.clone(), teacher, temps)
    tol = bounds.rounding(11)   # float32 sums over the 11-token rows (log-probabilities are O(1) here)
    assert same["tv"].abs().max() < tol and same["kl"].abs().max() < tol
    other = torch.randn(2, 5, 11)
    parts = divergences(other, teacher, temps)
    p, q = torch.softmax(teacher[0] / 1.0, -1), torch.softmax(other[0] / 1.0, -1)
    assert torch.allclose(parts["tv"][0], 1 - torch.minimum(p, q).sum(-1), atol=tol, rtol=0)   # TV = 1 - beta
    assert (parts["kl"] > 0).all()
    mask = position_mask(torch.tensor([3, 1]), 6)   # positions 2.. and 0.. predict sampled tokens
    assert mask.tolist() == [[False, False, True, True, True], [True] * 5]
    assert loss_of("mix", parts, mask.float()) == pytest.approx(
        0.5 * (loss_of("tv", parts, mask.float()) + loss_of("kl", parts, mask.float())).item())


def test_a_widened_mlp_computes_the_same_function():
    import torch

    from specdec.training.bundled.distill import widen_mlp
    from tiny import tiny_model

    model = tiny_model(vocab=12)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        before = model(ids).logits
        after = widen_mlp(model, 96)(ids).logits
    # zero-padded rows add exact zeros, but the MLP's longer sums may round in another order
    tol = bounds.rounding(96 + model.config.hidden_size, scale=float(before.abs().max()))
    assert model.config.intermediate_size == 96 and torch.allclose(before, after, atol=tol, rtol=0)
