"""The bundled pair loads offline like any hub model; hub presets fail fast offline."""

import re
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.core.sampling import SamplingConfig
from specdec.core.settings import RunSettings
from specdec.decoding.loop import autoregressive_generate, speculative_generate
from specdec.drafting.drafters import drafters_for
from specdec.models import manifest
from specdec.models.pair import ASSETS, ModelLoadError, check_same_tokenizer, load_pair
from specdec.training.bundled.recipe import train_tokenizer


def test_bundled_folders_load_with_auto_classes_and_share_a_tokenizer():
    target_dir, draft_dir = ASSETS / "specdec-target", ASSETS / "specdec-draft"
    tok_t = AutoTokenizer.from_pretrained(target_dir, local_files_only=True)
    tok_d = AutoTokenizer.from_pretrained(draft_dir, local_files_only=True)
    assert tok_t.get_vocab() == tok_d.get_vocab() and tok_t.eos_token == "<|endoftext|>"
    ids = tok_t("To be, or not to be", return_tensors="pt")["input_ids"]
    logits = []
    for folder in (target_dir, draft_dir):
        assert (folder / "model.safetensors").exists() and not list(folder.glob("*.bin"))
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
        with torch.no_grad():
            logits.append(model(ids).logits)
    assert logits[0].shape == logits[1].shape and logits[0].shape[-1] == len(tok_t)
    assert all(torch.isfinite(x).all() for x in logits)


def test_sizes_fit_the_budget():
    sizes = {f.parent.name + "/" + f.name: f.stat().st_size for f in ASSETS.rglob("*") if f.is_file()}
    assert (ASSETS / "specdec-draft" / "model.safetensors").stat().st_size <= 5e6
    assert (ASSETS / "specdec-target" / "model.safetensors").stat().st_size <= 25e6
    assert sum(sizes.values()) <= 30e6


def test_load_pair_defaults_to_bundled_in_float32_on_whatever_device_there_is():
    pair = load_pair()
    assert pair.vocab_size == len(pair.tokenizer) and pair.context_length >= 256
    assert pair.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pair.dtype == torch.float32 and pair.target.dtype == torch.float32   # exact by default, GPU too
    assert pair.engine == ("graphs" if torch.cuda.is_available() else "eager")


def test_hub_preset_offline_fails_fast_with_clear_message(monkeypatch):
    """Fast because it never waits on the network: no connection is even attempted (not a timing)."""
    import socket

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tried = []

    def refuse(what):
        tried.append(what)
        raise OSError("no network in this test")

    # A lookup comes before any connection (without the offline switch, huggingface.co is looked
    # up first: checked by hand, this list then holds it).
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: refuse(host))
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: refuse(address))
    with pytest.raises(ModelLoadError, match="bundled"):
        load_pair(preset="smollm2")
    assert tried == []


def test_unknown_preset_and_a_draft_alone_are_refused():
    with pytest.raises(ModelLoadError, match="unknown model pair"):
        load_pair(preset="gpt-17")
    with pytest.raises(ModelLoadError, match="a draft needs a target"):
        load_pair(draft=str(ASSETS / "specdec-draft"))


def test_a_target_alone_is_a_pair_without_a_draft_model_whose_model_drafter_is_refused_by_name():
    target = str(ASSETS / "specdec-target")
    lacks = "'model' drafter is a drafter this pair lacks.*Choose the 'features' or 'ngram'"
    with pytest.raises(ModelLoadError, match=lacks):
        load_pair(target=target, drafter="model")   # refused before the weights load
    pair = load_pair(target=target)
    assert pair.draft is None and pair.describe()["draft"] is None and "draft_layers" not in pair.describe()
    assert "model" not in drafters_for(pair) and "ngram" in drafters_for(pair)
    settings = RunSettings(max_new_tokens=8, drafter="model", sampling=SamplingConfig(temperature=0.0))
    with pytest.raises(ValueError, match="'model' drafter is a drafter this pair lacks"):
        speculative_generate(pair, "ROMEO.", settings)
    gen = speculative_generate(pair, "ROMEO.", settings.with_(drafter="ngram"))
    assert gen.token_ids == autoregressive_generate(pair, "ROMEO.", settings).token_ids   # greedy: the target's own


@pytest.mark.parametrize("name", ["/nonexistent", "/nonexistent/a", "./no-such-model", "~/no/such", "a/b/c"])
def test_a_missing_folder_is_reported_as_a_missing_folder(name):
    """Not as a hub id it could never be ("Repo id must use alphanumeric chars ...")."""
    with pytest.raises(ModelLoadError, match=f"^{re.escape(name)}: no such folder$"):
        load_pair(target=name, draft=name)


def test_a_file_is_not_a_model_folder(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"0")
    with pytest.raises(ModelLoadError, match="is a file, not a model folder"):
        load_pair(target=str(tmp_path / "weights.bin"), draft=str(ASSETS / "specdec-draft"))


# ---------------------------------------------------------------- the pair is what it claims (manifest.json)

def test_the_bundled_pair_matches_its_manifest():
    """assets/models/manifest.json records the bundled files; after re-training one on purpose,
    `python -m specdec manifest assets/models` records it again."""
    for name in ("specdec-target", "specdec-draft"):
        assert manifest.differences(ASSETS / name) == [], name
    recorded = manifest.recorded(ASSETS)
    assert {"specdec-target/model.safetensors", "specdec-draft/model.safetensors",
            "specdec-target/tokenizer.json"} <= set(recorded)


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def test_a_changed_pair_is_refused_saying_what_changed(tmp_path):
    copy = tmp_path / "models"
    shutil.copytree(ASSETS, copy)
    names = {"target": str(copy / "specdec-target"), "draft": str(copy / "specdec-draft")}
    assert load_pair(**names).label   # an intact copy loads
    _corrupt(copy / "specdec-draft" / "model.safetensors")
    with pytest.raises(ModelLoadError, match="specdec-draft/model.safetensors has another sha256"):
        load_pair(**names)
    (copy / "specdec-target" / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelLoadError, match=r"specdec-target/tokenizer.json has 2 bytes, manifest.json records"):
        load_pair(**names)
    manifest.write(copy)   # recorded on purpose: accepted again (the check is the manifest, not a verdict)
    assert manifest.differences(copy / "specdec-draft") == []


def test_the_bundled_pair_modified_says_how_to_restore_it(tmp_path, monkeypatch):
    import specdec.models.pair as models

    bundled = tmp_path / "assets" / "models"
    shutil.copytree(ASSETS, bundled)
    monkeypatch.setattr(models, "ASSETS", bundled)   # a copy stands in: the real pair is never touched
    names = {"target": str(bundled / "specdec-target"), "draft": str(bundled / "specdec-draft")}
    _corrupt(bundled / "specdec-target" / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"the bundled pair in assets/models was modified: "
                       r"specdec-target/model.safetensors .*git checkout assets/models"):
        load_pair(**names)
    (bundled / "manifest.json").unlink()
    with pytest.raises(ModelLoadError, match="manifest.json is missing"):
        load_pair(**names)


def test_pairs_with_different_tokenizers_are_refused(tmp_path):
    other = train_tokenizer(["a completely different little corpus " * 20], 300)
    bundled_tok = AutoTokenizer.from_pretrained(ASSETS / "specdec-target", local_files_only=True)
    with pytest.raises(ModelLoadError, match="different tokenizers"):
        check_same_tokenizer(bundled_tok, other, "target", "draft")


# ---------------------------------------------------------------- the pair cache (in process, fake loads)

@pytest.fixture
def fake_loads(monkeypatch):
    """get_pair with a loader that makes a small object per preset and counts the loads."""
    import specdec.app.server.pairs as pairs

    loads = []

    def fake_load_pair(preset=None, **_):
        loads.append(preset)
        return object()
    monkeypatch.setattr(pairs, "load_pair", fake_load_pair)
    monkeypatch.setattr(pairs, "_LOADED", type(pairs._LOADED)())
    return loads


def test_the_cache_keeps_at_most_max_pairs_and_pins_the_bundled_pair(fake_loads, monkeypatch):
    import specdec.app.server.pairs as models

    monkeypatch.setattr(models.limits, "MAX_PAIRS", 2)
    bundled = models.get_pair("bundled")
    for key in ("smollm2", "qwen2.5", "gpt2", "pythia"):
        models.get_pair(key)
        assert len(models.loaded_pairs()) <= 2
    assert models.loaded_pairs() == ["bundled", "pythia"]
    assert models.get_pair("bundled") is bundled and fake_loads.count("bundled") == 1
    models.get_pair("smollm2")   # evicted earlier: loads again
    assert fake_loads.count("smollm2") == 2


def test_a_limit_of_one_still_lets_one_hub_pair_load_beside_the_pinned_one(fake_loads, monkeypatch):
    import specdec.app.server.pairs as models

    monkeypatch.setattr(models.limits, "MAX_PAIRS", 1)
    models.get_pair("bundled")
    models.get_pair("gpt2")
    models.get_pair("pythia")
    assert models.loaded_pairs() == ["bundled", "pythia"]


def test_a_failed_load_leaves_the_cache_as_it_was(monkeypatch):
    import specdec.app.server.pairs as pairs
    import specdec.models.pair as models

    monkeypatch.setattr(pairs, "_LOADED", type(pairs._LOADED)())

    def no_memory(*_a, **_k):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    monkeypatch.setattr(models, "_load_model", no_memory)
    monkeypatch.setattr(models, "_load_tokenizer", lambda name, offline: AutoTokenizer.from_pretrained(
        ASSETS / "specdec-target", local_files_only=True))
    monkeypatch.setattr(models, "_in_hub_cache", lambda *names: True)
    monkeypatch.setattr(models, "_is_offline", lambda: True)
    with pytest.raises(ModelLoadError, match="not enough memory on this server to load"):
        pairs.get_pair("gpt2")
    assert pairs.loaded_pairs() == []


def test_describe_names_models_never_server_paths(bundled):
    d = bundled.describe()
    assert d["target"] == "specdec-target" and d["draft"] == "specdec-draft"
    assert not any(str(ASSETS) in str(v) for v in d.values())
    pair = load_pair(target=str(ASSETS / "specdec-target"), draft=str(ASSETS / "specdec-draft"))
    assert pair.label == "specdec-target / specdec-draft"
