"""Real pretrained Transformers through the named code: BERT, GPT-2 and Llama-family
checkpoints converted from ``transformers``, llama.cpp's GGUF files, the packaged
all-MiniLM-L6-v2 sentence encoder and the packaged SmolLM2-135M-Instruct."""

from named_transformer.interop.gguf import GGUFCheckpoint, from_gguf, read_gguf
from named_transformer.interop.huggingface import (
    checkpoint_names,
    from_huggingface,
    to_huggingface,
)
from named_transformer.pretrained.minilm import SentenceEncoder, Tokenized, load_minilm
from named_transformer.pretrained.smollm2 import (
    ChatModel,
    Generation,
    load_gguf,
    load_smollm2,
)
from named_transformer.pretrained.tokenizer import ChatTokenizer, gguf_tokenizer

__all__ = [
    "ChatModel",
    "ChatTokenizer",
    "GGUFCheckpoint",
    "Generation",
    "SentenceEncoder",
    "Tokenized",
    "checkpoint_names",
    "from_gguf",
    "from_huggingface",
    "gguf_tokenizer",
    "load_gguf",
    "load_minilm",
    "load_smollm2",
    "read_gguf",
    "to_huggingface",
]
