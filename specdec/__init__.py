"""specdec: an exact, traced speculative decoder over Hugging Face transformers models.

The names below load on first use (PEP 562), so `specdec --help` and `--version` answer without
importing torch; `from specdec import speculative_generate` works as before."""

from __future__ import annotations

import importlib

_WHERE = {
    "StopSignal": "decoding.loop", "autoregressive_generate": "decoding.loop", "speculative_generate": "decoding.loop",
    "PRESETS": "models.pair", "ModelLoadError": "models.pair", "ModelPair": "models.pair", "load_pair": "models.pair",
    "Rule": "core.sampling", "SamplingConfig": "core.sampling", "output_distribution": "core.sampling",
    "residual": "core.sampling", "verify": "core.sampling", "RunSettings": "core.settings",
    "Dist": "trace.spine", "Generation": "trace.spine", "Position": "trace.spine", "Round": "trace.spine",
    "Stats": "trace.spine", "load_trace": "trace.validate",
}
__all__ = ["RunSettings", "SamplingConfig", "Rule", "residual", "output_distribution", "verify", "Generation",
           "Round", "Position", "Dist", "Stats", "ModelPair", "ModelLoadError", "load_pair", "PRESETS",
           "speculative_generate", "autoregressive_generate", "StopSignal", "load_trace"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value   # once loaded, a plain attribute
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
