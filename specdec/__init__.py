"""specdec: an exact, traced speculative decoder over Hugging Face transformers models."""

from .decoding import StopSignal, autoregressive_generate, speculative_generate
from .models import PRESETS, ModelLoadError, ModelPair, load_pair
from .sampling import Rule, SamplingConfig, output_distribution, residual, verify
from .settings import RunSettings
from .trace import Dist, Generation, Position, Round, Stats
from .validate import load_trace

__all__ = ["RunSettings", "SamplingConfig", "Rule", "residual", "output_distribution", "verify", "Generation",
           "Round", "Position", "Dist", "Stats", "ModelPair", "ModelLoadError", "load_pair", "PRESETS",
           "speculative_generate", "autoregressive_generate", "StopSignal", "load_trace"]
__version__ = "0.1.0"
