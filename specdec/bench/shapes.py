"""`gpu-check --shapes`: the engine's costs for models shaped like the hub presets, offline.

A cost on a device follows a model's shape (layers, widths, heads, vocabulary), not its weights, so
a random-weight model built from a preset's published config costs what the preset costs, and needs
no download. These shapes exercise what the bundled pair cannot:
- vocabularies of 49,152 and 151,936 tokens (top-p's sort over a full row, inside a captured step;
  the trace's reduction on the device);
- 24 to 32 layers, grouped-query attention, Qwen2's biased projections.

The configs are copied from each model's `config.json` on the hub (the ids below); only the fields
that set the shape, and `max_position_embeddings` cut to what a timing needs (a static cache is
sized by the run, not by it). The measured costs become speed-explorer profiles with
`--save-profile`; α is not measured here (random weights accept nothing worth telling), so a
profile carries costs only, as every profile does.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import torch

# The shape-setting fields of each preset's config.json (hub id in the key's comment).
SHAPES: dict[str, dict] = {
    # HuggingFaceTB/SmolLM2-135M(-Instruct)
    "SmolLM2-135M": dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0,
                         rms_norm_eps=1e-5, tie_word_embeddings=True),
    # HuggingFaceTB/SmolLM2-360M(-Instruct)
    "SmolLM2-360M": dict(model_type="llama", vocab_size=49152, hidden_size=960, intermediate_size=2560,
                         num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5, rope_theta=100000.0,
                         rms_norm_eps=1e-5, tie_word_embeddings=True),
    # HuggingFaceTB/SmolLM2-1.7B(-Instruct)
    "SmolLM2-1.7B": dict(model_type="llama", vocab_size=49152, hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=32, rope_theta=130000.0,
                         rms_norm_eps=1e-5, tie_word_embeddings=True),
    # Qwen/Qwen2.5-0.5B(-Instruct)
    "Qwen2.5-0.5B": dict(model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, rope_theta=1000000.0,
                         rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False),
    # Qwen/Qwen2.5-1.5B(-Instruct)
    "Qwen2.5-1.5B": dict(model_type="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, rope_theta=1000000.0,
                         rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False),
}
CONTEXT = 512   # positions a timing needs (prompt + the widest verify), with room to spare

# Parameter counts as the models' names and hub cards state them (Qwen's cards: 0.49B and 1.54B),
# to 2-3 significant figures, for the test that a shape is the model it names (within 1 %: a wrong
# width, depth or head count moves the count by far more).
PARAMS = {"SmolLM2-135M": 135e6, "SmolLM2-360M": 360e6, "SmolLM2-1.7B": 1.7e9,
          "Qwen2.5-0.5B": 0.49e9, "Qwen2.5-1.5B": 1.54e9}


@dataclass(frozen=True)
class ShapePair:
    key: str
    target: str
    draft: str
    why: str


PAIRS: dict[str, ShapePair] = {p.key: p for p in [
    ShapePair("smollm2", "SmolLM2-360M", "SmolLM2-135M", "the smollm2 preset's shapes"),
    ShapePair("qwen2.5", "Qwen2.5-1.5B", "Qwen2.5-0.5B", "the qwen2.5 preset's shapes: a 152k vocabulary"),
    ShapePair("smollm2-1.7b", "SmolLM2-1.7B", "SmolLM2-135M",
              "a 135M-shaped draft beside a 1.7B-shaped target: the cheap draft the speed explorer's intro asks about"),
]}


def config(name: str, layers: int | None = None):
    """The transformers config of a shape (`layers` cuts its depth, for tests)."""
    from transformers import AutoConfig

    fields = dict(SHAPES[name])
    if layers is not None:
        fields["num_hidden_layers"] = layers
    kind = fields.pop("model_type")
    return AutoConfig.for_model(kind, max_position_embeddings=CONTEXT, **fields)


def build(name: str, device: str = "cpu", dtype: torch.dtype = torch.float32, layers: int | None = None,
          seed: int = 0):
    """A random-weight model of a shape, in eval mode (seeded: the same weights every time)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(name, layers), dtype=dtype)
    return model.to(device).eval()


def random_pair(key: str, device: str = "cpu", dtype: torch.dtype = torch.float32, engine: str = "eager",
                layers: int | None = None):
    """A ModelPair of random-weight models with a preset's shapes; no tokenizer (prompts are ids)."""
    from ..models.pair import ModelPair

    spec = PAIRS[key]
    target = build(spec.target, device, dtype, layers, seed=1)
    draft = build(spec.draft, device, dtype, layers, seed=2)
    return ModelPair(None, target, draft, f"{spec.target} (random weights)", f"{spec.draft} (random weights)",
                     device=device, dtype=dtype, label=f"{spec.target} / {spec.draft} shapes", engine=engine)


def prompt_ids(pair, n: int = 16, seed: int = 0) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, pair.vocab_size, (n,), generator=gen).tolist()


def measure(pair, widths: list[int], repeats: int) -> dict:
    """The pair's forward costs on its engine (the static or graph engine's `costs`; the eager
    path's cost meter where there is no engine), as `gpu-check`'s speed section measures them."""
    from ..core.sampling import SamplingConfig
    from ..engine.engine import engine_for
    from ..explain.measure import measure_costs

    ids = prompt_ids(pair)
    engine = engine_for(pair)
    if engine is not None:
        return engine.costs(ids, widths, SamplingConfig(), repeats=repeats)
    return {**measure_costs(pair, ids, widths, steps=repeats), "engine": "eager"}


def sampled_run(pair, tokens: int) -> dict:
    """One traced speculative run at T = 1, top-p 0.9, γ 4 on the pair's engine: the full-row sort
    of a large vocabulary inside the captured steps, and the trace's reduction on the device."""
    from ..core.sampling import SamplingConfig
    from ..core.settings import RunSettings
    from ..decoding.loop import speculative_generate

    s = RunSettings(gamma=4, max_new_tokens=tokens, sampling=SamplingConfig(temperature=1.0, top_p=0.9), seed=0)
    gen = speculative_generate(pair, prompt_ids(pair), s, trace=True)
    return {"tokens": gen.stats.new_tokens, "rounds": len(gen.rounds), "engine": gen.models["engine"]}


def run_shapes(device: str, dtype: torch.dtype, engine: str, keys: list[str], widths: list[int], repeats: int,
               tokens: int, graphs_check, log=print, layers: int | None = None) -> list[dict]:
    """Each pair in `keys`, built, timed, run once sampled, checked by `graphs_check(pair)` (gpu-check's
    `graphs_in_use`) and freed before the next (`layers` cuts every model's depth: the tests' way to
    run this on a CPU in seconds)."""
    out = []
    for key in keys:
        started = time.perf_counter()
        pair = random_pair(key, device, dtype, engine, layers)
        log(f"{pair.label}: built on {device} ({pair.describe()['target_params'] / 1e6:.0f}M + "
            f"{pair.describe()['draft_params'] / 1e6:.0f}M parameters, vocabulary {pair.vocab_size})")
        costs = measure(pair, widths, repeats)
        run = sampled_run(pair, tokens)
        graphs = graphs_check(pair)
        out.append({"key": key, "label": pair.label, "why": PAIRS[key].why, "describe": pair.describe(),
                    "costs": costs, "sampled_run": run, "graphs": graphs,
                    "seconds": round(time.perf_counter() - started, 1)})
        log(format_row(out[-1]))
        del pair
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def format_row(r: dict) -> str:
    c = r["costs"]
    widths = ", ".join(f"{w}: {ms:.2f}" for w, ms in sorted(c["target_ms_by_width"].items(), key=lambda kv: int(kv[0])))
    return (f"  {r['label']:<32} {c['engine']:<12} draft step {c['draft_step_ms']:8.2f} ms   target step "
            f"{c['target_step_ms']:8.2f} ms   c = {c['c']:.3f}\n      verify by width (ms): {widths}\n"
            f"      a sampled run (T = 1, top-p 0.9, γ 4, traced): {r['sampled_run']['tokens']} tokens in "
            f"{r['sampled_run']['rounds']} rounds; {r['graphs']['check']}: "
            f"{'yes' if r['graphs']['ok'] else 'NO'} ({r['graphs']['result']}); {r['seconds']:.0f} s")
