"""specdec: an exact, traced speculative decoder over Hugging Face transformers models.

The names below load on first use (PEP 562), so `specdec --help` and `--version` answer without
importing torch; `from specdec import speculative_generate` works as before."""

from __future__ import annotations

import importlib

_WHERE = {
    "StopSignal": "decoding", "autoregressive_generate": "decoding", "speculative_generate": "decoding",
    "PRESETS": "models", "ModelLoadError": "models", "ModelPair": "models", "load_pair": "models",
    "Rule": "sampling", "SamplingConfig": "sampling", "output_distribution": "sampling", "residual": "sampling",
    "verify": "sampling", "RunSettings": "settings", "Dist": "trace", "Generation": "trace", "Position": "trace",
    "Round": "trace", "Stats": "trace", "load_trace": "validate",
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
