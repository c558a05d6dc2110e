"""The training command end to end on a tiny config, in a temporary folder (never the real recipe)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec import RunSettings, SamplingConfig, autoregressive_generate, load_pair, speculative_generate

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_tiny_training_run_produces_a_loadable_pair(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = "ROMEO.\nBut soft, what light through yonder window breaks?\nJULIET.\nO Romeo, Romeo.\n"
    for i in range(12):   # whole "works": the split holds out every 10th
        (corpus / f"work{i:02d}.txt").write_text(text * (5 + i))
    out = tmp_path / "models"
    r = subprocess.run([sys.executable, "-m", "specdec", "train", "--tiny", "--out", str(out),
                        "--corpus-dir", str(corpus)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "step 6/6" in r.stdout
    for name in ("specdec-target", "specdec-draft"):
        assert (out / name / "model.safetensors").exists() and (out / name / "README.md").exists()
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
