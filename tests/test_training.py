"""The training command end to end on a tiny config, in a temporary folder (never the real recipe)."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from specdec import load_pair, speculative_generate

ROOT = Path(__file__).resolve().parent.parent


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
    pair = load_pair(target=str(out / "specdec-target"), draft=str(out / "specdec-draft"))
    gen = speculative_generate(pair, "ROMEO.", gamma=3, max_new_tokens=10, seed=0)
    assert len(gen.token_ids) >= 1 and torch.isfinite(torch.tensor(gen.stats.acceptance_rate))
