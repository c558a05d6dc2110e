"""The fused layers' rows of cached training shards (EAGLE-3's low and middle features).

A drafter with `feature_layers` (`drafting.features.FeatureNet.fused`) reads, beside the target's
post-norm last hidden state, its residual stream after some middle layers. The shards under a data
folder (`sharegpt.make_split`) keep the post-norm feature only; this pass adds the middle layers'
rows, one file per shard in a folder of their own (`data/layers-2-15/train-00000.pt`), so one set
of shards serves drafters with and without fusion, and a cut-off pass goes on where it stopped.

The rows come from the same forward the shards' features did (the real pair's default precision:
bfloat16, batch-invariant) and are kept in bfloat16, so they are exactly what that forward gave.
The forward stops after the deepest layer asked for: layers 2 and 15 of SmolLM2-135M's 30 cost half
a forward.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ...drafting.features import rows_after

__all__ = ["folder_of", "add_layer_rows", "made_for"]


def folder_of(data: Path, layers: tuple[int, ...]) -> Path:
    return data / ("layers-" + "-".join(str(i) for i in layers))


def add_layer_rows(target, data: Path, layers: tuple[int, ...], shards: list[Path], log=print, batch: int = 8
                   ) -> Path:
    """Write the rows of `layers` for each of `shards` (files under `data`) that has none yet
    (bfloat16, in `folder_of(data, layers)`); logs tokens/s and an ETA. Returns that folder."""
    out = folder_of(data, layers)
    out.mkdir(exist_ok=True)
    todo = [p for p in shards if not (out / p.name).exists()]
    t0, tokens = time.perf_counter(), 0
    for n, path in enumerate(todo, 1):
        shard = torch.load(path)
        ids = shard["ids"]
        width = int(shard["ends"].max())   # past every row's end nothing is read
        rows = torch.cat([rows_after(target, ids[a:a + batch, :width], layers).to(torch.bfloat16)
                          for a in range(0, len(ids), batch)])
        tmp = out / (path.name + ".part")
        torch.save({"layers": list(layers), "rows": rows}, tmp)
        tmp.replace(out / path.name)
        tokens += int(shard["ends"].sum())
        spent = time.perf_counter() - t0
        log(f"layers {list(layers)}: {path.name} ({n}/{len(todo)}), {tokens / spent:.0f} tokens/s, "
            f"ETA {spent / n * (len(todo) - n) / 60:.1f} min")
    return out


def made_for(forward, data: Path, layers: tuple[int, ...], shards: list[Path], log=print) -> Path:
    """`add_layer_rows` with `forward`, the target as the real pair runs it by default, for shards
    that say they were made so (the rows must come from the forward the features did)."""
    import json

    if not json.loads((data / "data.json").read_text())["data"].get("default_precision"):
        raise ValueError(f"{data} was not made in the default precision: fused layers need --data answers")
    return add_layer_rows(forward, data, layers, shards, log)
