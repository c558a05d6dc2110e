"""Cost profiles measured by the project's own commands, kept in `assets/bench/cost-profiles.json`
(the speed explorer draws one curve per profile; see `specdec.explain.speed.CostProfile`).

`bench --save-profile` and `gpu-check --save-profile` add the costs they measured, replacing a
profile of the same name: one file, written only when asked.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path

import torch

from ..explain.speed import profile_from_dict

DEFAULT = Path(__file__).resolve().parents[2] / "assets" / "bench" / "cost-profiles.json"


def profile(costs: dict, pair_description: dict, where: str, source: str, name: str | None = None,
            pair: str = "", drafter: str = "") -> dict:
    """A profile from measured costs (`draft_step_ms`, `target_step_ms`, `target_ms_by_width`);
    `pair` and `drafter` (a preset key, a drafter) where it is one pair's own (`explain.gamma`)."""
    d = pair_description
    engine = {"graphs": "cuda graphs", "static": "static cache"}.get(d["engine"], d["engine"])
    entry = {"name": name or f"{where}, {engine}, {d['dtype']}", "where": where, "when": time.strftime("%Y-%m-%d"),
             "device": d["device"], "dtype": d["dtype"], "engine": engine,
             "target_step_ms": round(costs["target_step_ms"], 4), "draft_step_ms": round(costs["draft_step_ms"], 4),
             "verify_ms_by_width": {str(k): round(v, 4) for k, v in sorted(costs["target_ms_by_width"].items(),
                                                                        key=lambda kv: int(kv[0]))},
             "source": source, **({"pair": pair, "drafter": drafter} if pair else {})}
    profile_from_dict(entry)   # refuse to write what the explorer could not read
    return entry


def bench_profile(results: dict, pair, preset: str | None, json_path) -> dict | None:
    """The profile a bench run measured, for `bench --save-profile`. With a draft model: its step,
    as always (the bundled pair's "this CPU, bench (every width)"). A pair without one (a real
    model) is profiled with its features drafter: its draft step is the median over the features
    rows of their measured c (the drafter's time per draft / a target step), and the profile
    names the preset and drafter, so that `explain.gamma` can pick that pair's γ from it."""
    costs, source = results["costs"], (f"python -m specdec bench ({json_path}; median of the timed forwards "
                                       "spread between the passes)")
    where = f"this CPU ({machine()})" if pair.describe()["device"] == "cpu" else machine()
    if costs["draft_step_ms"] is not None:
        return profile(costs, pair.describe(), where, source, name="this CPU, bench (every width)")
    cs = [r["c"] for r in results["rows"] if r["kind"] == "specdec_features" and r.get("c")]
    if not cs or not preset:
        return None
    costs = dict(costs, draft_step_ms=statistics.median(cs) * costs["target_step_ms"])
    name = f"this CPU, {pair.describe()['target']} + features drafter, bench (every width)"
    return profile(costs, pair.describe(), where, source + "; the draft step: the features drafter's median c "
                   f"over its {len(cs)} rows", name=name, pair=preset, drafter="features")


def save(entry: dict, path: Path = DEFAULT) -> Path:
    """Add `entry` to the profiles file, replacing a profile of the same name where it stands (the
    explorer lists them in the file's order)."""
    path = Path(path)
    profiles = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    names = [p.get("name") for p in profiles]
    if entry["name"] in names:
        profiles[names.index(entry["name"])] = entry
    else:
        profiles.append(entry)
    path.write_text(json.dumps(profiles, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def machine() -> str:
    """This machine in words, for a profile's `where`."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    threads = torch.get_num_threads()
    return f"{platform.machine()} CPU, {threads} torch thread{'s' if threads > 1 else ''}"
