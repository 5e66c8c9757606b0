"""Decoding: greedy, beam search and sampling; the cached and the compiled decoders."""

from named_transformer.decoding.compiled import CompiledDecoder
from named_transformer.decoding.incremental import IncrementalDecoder
from named_transformer.decoding.search import (
    Decoded,
    beam_search,
    greedy,
    length_penalty,
    nucleus_mask,
    sample,
    stream,
    strip_after_eos,
)
from named_transformer.decoding.step import cached_self_attention

__all__ = [
    "CompiledDecoder",
    "Decoded",
    "IncrementalDecoder",
    "beam_search",
    "cached_self_attention",
    "greedy",
    "length_penalty",
    "nucleus_mask",
    "sample",
    "stream",
    "strip_after_eos",
]
