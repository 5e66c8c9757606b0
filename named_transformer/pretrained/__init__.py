"""Real pretrained Transformers through the named code: BERT and GPT-2 checkpoints
converted from ``transformers``, and the packaged all-MiniLM-L6-v2 sentence encoder."""

from named_transformer.interop.huggingface import (
    checkpoint_names,
    from_huggingface,
    to_huggingface,
)
from named_transformer.pretrained.minilm import SentenceEncoder, Tokenized, load_minilm

__all__ = [
    "SentenceEncoder",
    "Tokenized",
    "checkpoint_names",
    "from_huggingface",
    "load_minilm",
    "to_huggingface",
]
