"""transformer-mt: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from .config import Config, DecodeConfig, ModelConfig, load_config
from .data.vocab import Vocabulary, train_vocabulary
from .inference.ensemble import Ensemble
from .inference.search import (
    DecodingModel,
    Hypothesis,
    beam_search,
    generate,
    greedy_search,
    sample,
)
from .inference.translator import Translation, Translator
from .model.transformer import Memory, Transformer
from .storage.model_dir import ModelLoadError, load_model, save_model
from .training.checkpoint import average_checkpoints
from .training.loop import train

__version__ = "0.1.0"

__all__ = [
    "Config", "DecodeConfig", "DecodingModel", "Ensemble", "Hypothesis", "Memory", "ModelConfig",
    "ModelLoadError", "Transformer", "Translation", "Translator", "Vocabulary",
    "average_checkpoints", "beam_search", "generate", "greedy_search", "load_config",
    "load_model", "sample", "save_model", "train", "train_vocabulary",
]
