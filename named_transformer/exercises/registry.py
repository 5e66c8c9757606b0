"""The exercises, in the order of the Learn and Models pages.

Each exercise names the library function it mirrors (the learner writes the same
function, with the same signature), the page and section to reread, and its checks
(:data:`~named_transformer.exercises.checks.CHECKS`). A layer's exercise is one method:
the learner subclasses the library's class and writes only ``method`` (``forward``), so
``__init__`` and the weights stay the library's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["EXERCISES", "PAGES", "Exercise", "exercise"]


@dataclass(frozen=True)
class Exercise:
    """One function to write: ``name`` is the library function's name, or the class's
    name when ``method`` names the one method to write."""

    name: str
    module: str  # the library module that defines it
    page: str  # the docs page, relative to docs/
    section: str  # the anchor of the section to reread
    heading: str  # that section's title
    method: str | None = None  # a method of the class ``name``: the learner's part

    @property
    def library_function(self) -> Callable[..., Any]:
        """The library's own implementation (the class, for a method's exercise)."""
        return getattr(importlib.import_module(self.module), self.name)

    @property
    def checks(self) -> tuple[Callable[[Callable[..., Any]], None], ...]:
        """The checks, in the order they run."""
        # the checks import torch and hypothesis: not for the command line's parser
        from named_transformer.exercises.checks import CHECKS

        return CHECKS[self.name]

    @property
    def file(self) -> str:
        """The learner's file that holds it: one per page."""
        return PAGES[self.page][0]

    @property
    def hint(self) -> str:
        """Where to reread: the page, its section, and the section's title."""
        return f"docs/{self.page}#{self.section} ({self.heading})"


PAGES: dict[str, tuple[str, str]] = {
    "learn/notation.md": ("notation.py", "Named tensor notation"),
    "learn/soft-dictionary.md": ("soft_dictionary.py",
                                 "Attention as a soft dictionary"),
    "learn/basic-self-attention.md": ("basic_self_attention.py",
                                      "Basic self-attention"),
    "learn/scores.md": ("scores.py", "Queries, keys, values and the score zoo"),
    "learn/masks.md": ("masks.py", "Masks: causal and padding"),
    "learn/building-blocks.md": ("building_blocks.py", "Building blocks"),
    "models/multihead-attention.md": ("multihead_attention.py",
                                      "Multi-head attention"),
    "models/positions.md": ("positions.py", "Embeddings and positions"),
    "models/encoder-decoder.md": ("encoder_decoder.py",
                                  "The encoder-decoder Transformer"),
    "models/bahdanau.md": ("bahdanau.py", "Attention in seq2seq (Bahdanau)"),
    "models/look-inside.md": ("look_inside.py", "Look inside a Transformer"),
    "workflows/decoding.md": ("decoding.py", "Decode: greedy, beam search, "
                              "sampling, and the key/value cache"),
}  # fmt: skip
"""Each page's learner file and title, in the order of the site."""

_CORE = "named_transformer.core"
_MODELS = "named_transformer.models"
_ZOO = ("learn/scores.md", "the-zoo", "The zoo")
_TRANSFORMER = ("learn/scores.md", "the-transformers-attention",
                "The Transformer's attention")  # fmt: skip
_NORM = ("learn/building-blocks.md", "layer-normalisation", "Layer normalisation")
_INSIDE = "named_transformer.inside.analyses"
_HEADS = ("models/multihead-attention.md", "the-named-equation", "The named equation")

EXERCISES: dict[str, Exercise] = {
    e.name: e
    for e in [
        Exercise("softmax", f"{_CORE}.softmax", "learn/notation.md",
                 "softmax-over-an-axis", "Softmax over an axis"),
        Exercise("attend", f"{_CORE}.attention", "learn/soft-dictionary.md",
                 "self-attention-as-an-expectation",
                 "Self-attention as an expectation"),
        Exercise("basic_self_attention", f"{_CORE}.basic",
                 "learn/basic-self-attention.md", "the-named-equation",
                 "The named equation"),
        Exercise("dot_score", f"{_CORE}.scores", *_ZOO),
        Exercise("scaled_dot_score", f"{_CORE}.scores", *_ZOO),
        Exercise("general_score", f"{_CORE}.scores", *_ZOO),
        Exercise("additive_score", f"{_CORE}.scores", *_ZOO),
        Exercise("cosine_score", f"{_CORE}.scores", *_ZOO),
        Exercise("location_score", f"{_CORE}.scores", *_ZOO),
        Exercise("attention_weights", f"{_CORE}.attention", *_TRANSFORMER),
        Exercise("attention", f"{_CORE}.attention", *_TRANSFORMER),
        Exercise("causal_mask", f"{_CORE}.masks", "learn/masks.md",
                 "the-causal-mask", "The causal mask"),
        Exercise("padding_mask", f"{_CORE}.masks", "learn/masks.md",
                 "the-padding-mask", "The padding mask"),
        Exercise("standardize", f"{_CORE}.norm", *_NORM),
        Exercise("layer_norm", f"{_CORE}.norm", *_NORM),
        Exercise("feed_forward", f"{_CORE}.feedforward", "learn/building-blocks.md",
                 "the-position-wise-feed-forward-network",
                 "The position-wise feed-forward network"),
        Exercise("sinusoidal_positions", f"{_CORE}.positions",
                 "learn/building-blocks.md", "positional-encodings",
                 "Positional encodings"),
        Exercise("project_heads", f"{_MODELS}.multihead", *_HEADS),
        Exercise("merge_heads", f"{_MODELS}.multihead", *_HEADS),
        # the pipeline: the weights in one AttentionWeights, the parts in a variant
        Exercise("multihead", f"{_MODELS}.multihead", "models/multihead-attention.md",
                 "one-attention-many-variants", "One attention, many variants"),
        Exercise("relative_attention_weights", f"{_MODELS}.relative",
                 "models/positions.md", "relative-positions-shaw-et-al-2018",
                 "Relative positions (Shaw et al. 2018)"),
        Exercise("EncoderLayer", f"{_MODELS}.encoder", "models/encoder-decoder.md",
                 "the-encoder-layer", "The encoder layer", method="forward"),
        Exercise("DecoderLayer", f"{_MODELS}.decoder", "models/encoder-decoder.md",
                 "the-decoder-layer-self-vs-cross-attention",
                 "The decoder layer: self vs cross attention", method="forward"),
        Exercise("gru_cell", f"{_MODELS}.rnn", "models/bahdanau.md",
                 "recurrent-cells-in-named-notation",
                 "Recurrent cells in named notation"),
        Exercise("bahdanau_attention", f"{_MODELS}.seq2seq", "models/bahdanau.md",
                 "the-decoder-a-context-per-output-position",
                 "The decoder: a context per output position"),
        Exercise("induction_score", _INSIDE, "models/look-inside.md",
                 "induction-heads-in-smollm2", "Induction heads in SmolLM2"),
        Exercise("lens", _INSIDE, "models/look-inside.md",
                 "the-logit-lens-on-the-dates-model",
                 "The logit lens on the dates model"),
        Exercise("head_attribution", _INSIDE, "models/look-inside.md",
                 "analyses-as-named-equations", "Analyses as named equations"),
        Exercise("cached_self_attention", "named_transformer.decoding.step",
                 "workflows/decoding.md", "the-keyvalue-cache",
                 "The key/value cache"),
    ]
}  # fmt: skip
"""Every exercise by name, in the order of the pages."""


def exercise(name: str) -> Exercise:
    """The exercise called ``name``; a ValueError listing the names otherwise."""
    if name not in EXERCISES:
        raise ValueError(
            f"no exercise called {name!r}; the exercises are: {', '.join(EXERCISES)}"
        )
    return EXERCISES[name]
