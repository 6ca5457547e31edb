"""transformer-mt: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from .config import Config, DecodeConfig, ModelConfig, load_config
from .decoding import Hypothesis, beam_search, generate, greedy_search, sample
from .ensemble import Ensemble
from .model import Memory, Transformer
from .model_io import ModelLoadError, load_model, save_model
from .translator import Translation, Translator
from .vocab import Vocabulary, train_vocabulary

__version__ = "0.1.0"

__all__ = [
    "Config", "DecodeConfig", "Ensemble", "Hypothesis", "Memory", "ModelConfig", "ModelLoadError",
    "Transformer", "Translation", "Translator", "Vocabulary", "beam_search", "generate",
    "greedy_search", "load_config", "load_model", "sample", "save_model", "train_vocabulary",
]
