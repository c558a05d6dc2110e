"""specdec: an exact, traced speculative decoder over Hugging Face transformers models."""

from .sampling import SamplingConfig, Rule, residual, output_distribution, verify
from .trace import Generation, Round, Position, Dist, Stats
from .models import ModelPair, ModelLoadError, load_pair, PRESETS
from .decoding import speculative_generate, autoregressive_generate

__all__ = ["SamplingConfig", "Rule", "residual", "output_distribution", "verify", "Generation",
           "Round", "Position", "Dist", "Stats", "ModelPair", "ModelLoadError", "load_pair", "PRESETS",
           "speculative_generate", "autoregressive_generate"]
__version__ = "0.1.0"
