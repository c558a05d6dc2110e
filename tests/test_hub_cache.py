"""Hub pairs through the real hub code path, offline, and the pair cache's limit.

The bundled pair is copied into a temporary Hugging Face cache under the hub presets' own ids, in
the layout huggingface_hub writes (models--org--name/{blobs, snapshots/<rev>, refs/main}), and
the presets load by id with HF_HUB_OFFLINE=1: the very code a Space runs with the network. Each
scenario runs in a fresh process, so its resident memory is its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specdec.models.pair import ASSETS, PRESETS, display_name

REVISION = "0123456789abcdef0123456789abcdef01234567"
HUB_PRESETS = [k for k, p in PRESETS.items() if p.hub][:3]


def add_to_hub_cache(cache: Path, repo_id: str, folder: Path) -> Path:
    """`folder` as huggingface_hub stores a download of `repo_id`: blobs named by content hash,
    snapshot entries linking to them, refs/main naming the revision. Returns the snapshot."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    for f in folder.iterdir():
        if not f.is_file():
            continue
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        blob = repo / "blobs" / digest
        if not blob.exists():
            shutil.copyfile(f, blob)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / f.name)
    return snapshot


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("hf-hub-cache")
    for key in HUB_PRESETS:
        add_to_hub_cache(cache, PRESETS[key].target, ASSETS / "specdec-target")
        add_to_hub_cache(cache, PRESETS[key].draft, ASSETS / "specdec-draft")
    return cache


def run_offline(cache: Path, code: str, **env) -> dict:
    """Run `code` in a fresh Python with the cache as HF_HUB_CACHE, offline; it prints one JSON line."""
    full_env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "OMP_NUM_THREADS": "1", **env}
    prelude = textwrap.dedent("""
        import json, torch
        torch.set_num_threads(1)
        def rss_mb():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    """)
    out = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=full_env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_hub_preset_loads_by_id_from_the_cache_offline(hub_cache):
    key = HUB_PRESETS[0]
    result = run_offline(hub_cache, f"""
        from specdec.models.pair import context_of
        from specdec.app.server.pairs import get_pair
        from specdec.decoding.loop import speculative_generate
        from specdec.core.settings import RunSettings
        pair = get_pair({key!r})
        gen = speculative_generate(pair, "To be, or not to be", RunSettings(max_new_tokens=8, seed=1))
        print(json.dumps(dict(models=gen.models, tokens=len(gen.token_ids), context=context_of({key!r}))))
    """)
    assert result["tokens"] == 8
    # the trace names the models by hub id, never by a path on the server
    assert result["models"]["target"] == PRESETS[key].target
    assert result["models"]["draft"] == PRESETS[key].draft
    assert result["context"] == 256   # read from the cached config, before or without loading


@pytest.mark.slow
def test_a_preset_missing_from_the_cache_fails_fast_with_a_clear_message(tmp_path):
    result = run_offline(tmp_path, f"""
        import time
        from specdec.models.pair import ModelLoadError
        from specdec.app.server.pairs import get_pair, loaded_pairs
        t0 = time.perf_counter()
        try:
            get_pair({HUB_PRESETS[0]!r})
            msg = None
        except ModelLoadError as err:
            msg = str(err)
        print(json.dumps(dict(msg=msg, seconds=time.perf_counter() - t0, loaded=loaded_pairs())))
    """)
    assert "offline" in result["msg"] and "bundled" in result["msg"]
    assert result["seconds"] < 10 and result["loaded"] == []


@pytest.mark.slow
def test_a_broken_cached_model_fails_to_load_and_the_cache_keeps_serving(tmp_path):
    key = HUB_PRESETS[0]
    snapshot = add_to_hub_cache(tmp_path, PRESETS[key].target, ASSETS / "specdec-target")
    add_to_hub_cache(tmp_path, PRESETS[key].draft, ASSETS / "specdec-draft")
    weights = snapshot / "model.safetensors"
    weights.unlink()
    weights.write_bytes(b"not a safetensors file")
    result = run_offline(tmp_path, f"""
        from specdec.models.pair import ModelLoadError
        from specdec.app.server.pairs import get_pair, loaded_pairs
        get_pair("bundled")
        try:
            get_pair({key!r})
            msg = None
        except ModelLoadError as err:
            msg = str(err)
        pair = get_pair("bundled")
        print(json.dumps(dict(msg=msg, loaded=loaded_pairs(), ok=pair.encode("To be")[1] != [])))
    """)
    assert result["msg"] and "could not load" in result["msg"]
    assert result["loaded"] == ["bundled"] and result["ok"]


@pytest.mark.slow
def test_the_pair_cache_evicts_the_least_recently_used_and_memory_returns(hub_cache):
    """SPECDEC_MAX_PAIRS=2: the bundled pair (pinned) and one hub pair. Loading three hub pairs in
    turn evicts the older ones; resident memory grows by about one pair, not three."""
    result = run_offline(hub_cache, f"""
        import gc
        from specdec.models.pair import release_memory
        from specdec.app.server.pairs import get_pair, loaded_pairs
        keys = {HUB_PRESETS!r}
        bundled = id(get_pair("bundled"))
        release_memory()
        rss = [rss_mb()]
        order = []
        weights = []
        for key in keys:
            pair = get_pair(key)
            weights.append(sum(t.numel() * t.element_size() for m in (pair.target, pair.draft) if m is not None
                               for t in m.state_dict().values()) / 2**20)
            del pair               # no reference kept: the cache alone holds it
            get_pair("bundled")    # the pinned pair is used in between
            gc.collect()
            release_memory()
            rss.append(rss_mb())
            order.append(loaded_pairs())
        print(json.dumps(dict(rss=rss, order=order, weights=weights, same_bundled=id(get_pair("bundled")) == bundled)))
    """, SPECDEC_MAX_PAIRS="2")
    a, b, c = HUB_PRESETS
    assert result["order"] == [[a, "bundled"], [b, "bundled"], [c, "bundled"]]
    assert result["same_bundled"]   # never evicted, never reloaded
    rss, pair_mb = result["rss"], min(result["weights"])   # a pair's weights (MB): ~30 of float32
    assert rss[1] - rss[0] > 0.5 * pair_mb, (rss, pair_mb)   # the first hub pair shows in resident memory
    # after the second and third loads no evicted pair stays resident: one kept would add pair_mb, both
    # 2 pair_mb; what the allocator keeps of freed blocks beside them is less (0-10.5 MB of 20.8 seen)
    assert rss[3] - rss[1] < pair_mb, (rss, pair_mb)


@pytest.mark.slow
def test_the_recently_used_pair_survives(hub_cache):
    """Least recently USED, not first loaded: a pair used again outlives one loaded after it."""
    a, b, c = HUB_PRESETS
    result = run_offline(hub_cache, f"""
        from specdec.app.server.pairs import get_pair, loaded_pairs
        get_pair({a!r}); get_pair({b!r}); get_pair({a!r})
        before = loaded_pairs()
        get_pair({c!r})
        print(json.dumps(dict(before=before, after=loaded_pairs())))
    """, SPECDEC_MAX_PAIRS="2")
    assert result["before"] == [b, a]
    assert result["after"] == [a, c]   # b, the least recently used, went


def test_display_names_never_carry_server_paths():
    assert display_name(str(ASSETS / "specdec-target")) == "specdec-target"
    assert display_name("HuggingFaceTB/SmolLM2-360M-Instruct") == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert display_name("./models/mine/") == "mine"
    assert display_name("C:\\models\\mine") == "mine"


def test_an_exported_trace_carries_model_names_not_paths(bundled):
    from specdec.core.settings import RunSettings
    from specdec.decoding.loop import speculative_generate

    gen = speculative_generate(bundled, "To be", RunSettings(max_new_tokens=4))
    text = gen.to_json()
    assert str(ASSETS) not in text and str(Path.home()) not in text
    models = json.loads(text)["models"]
    assert models["target"] == "specdec-target" and models["draft"] == "specdec-draft"
