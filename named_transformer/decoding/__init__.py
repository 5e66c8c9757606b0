"""Decoding: greedy, beam search and sampling; the cached and the compiled decoders."""

from named_transformer.decoding import search
from named_transformer.decoding.compiled import CompiledDecoder
from named_transformer.decoding.incremental import IncrementalDecoder
from named_transformer.decoding.search import *  # noqa: F403 (its __all__, re-exported)
from named_transformer.decoding.step import cached_self_attention

__all__ = [
    "CompiledDecoder",
    "IncrementalDecoder",
    "cached_self_attention",
    *search.__all__,
]
