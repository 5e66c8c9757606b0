r"""The recipes of the command line's training runs: plain numbers, no torch.

How each generated task trains (:data:`RECIPES`, over the model :data:`SIZES`; the
paper's settings, :data:`PAPER`), the position schemes a run may name, the model kinds
it may train, and the text recipe (:class:`TextSettings`) with the ``train text``
options. :mod:`~named_transformer.workflows.runner` and
:mod:`~named_transformer.workflows.text` train with them; the command line's parser
(:mod:`~named_transformer.workflows.cli`) reads them without importing torch, so that
``--help`` answers at once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from named_transformer.models.config import TransformerConfig

__all__ = [
    "KINDS",
    "LEVELS",
    "PAPER",
    "POSITIONS",
    "RECIPES",
    "SIZES",
    "TextSettings",
    "add_text_options",
    "position_choices",
    "text_settings",
]

# The model kinds of :data:`~named_transformer.workflows.kinds.MODEL_KINDS`, by name, in
# its order (a test checks they are the same): the choices of ``train --model``.
KINDS = ("encoder-decoder", "decoder-only", "classifier", "bag-of-words")
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"layers": 1, "layer": 32, "heads": 2, "hidden": 64},
    "small": {"layers": 2, "layer": 64, "heads": 4, "hidden": 256},
    "medium": {"layers": 3, "layer": 128, "heads": 4, "hidden": 512},
}
POSITIONS = ("sinusoidal", "learned", "relative", "rotary", "alibi")  # built in


def position_choices() -> tuple[str, ...]:
    """Every ``positions`` a spec may name: the built-in kinds, then any scheme
    registered later in :data:`~named_transformer.models.variants.SCHEMES`
    (``"none"``, no positions at all, cannot learn an ordered task: left out)."""
    # a scheme is registered by importing its module, which imports variants first:
    # none can have been while variants is not imported (the parser's case, no torch)
    variants = sys.modules.get("named_transformer.models.variants")
    schemes = () if variants is None else variants.SCHEMES
    later = [kind for kind in schemes if kind not in POSITIONS and kind != "none"]
    return (*POSITIONS, *later)


# --8<-- [start:RECIPES]
# How each generated task trains well on 2 CPU cores: the command line's defaults.
# Dropout 0 (these tasks have no noise to overfit to), a learning-rate factor of 0.3
# (0.1 peaks near the paper's 7e-4 at width 64), early stop once the target holds
# (copy: on 1,000 validation items in 3 evaluations in a row, so that the rare miss
# of a model at 99.8% is seen before it stops).
RECIPES: dict[str, dict[str, Any]] = {
    "copy": {"size": "tiny", "dropout": 0.0, "factor": 0.3, "steps": 4000,
             "eval_size": 1000, "patience": 3},
    "reverse": {"size": "tiny", "dropout": 0.0, "factor": 0.15, "warmup": 200,
                "steps": 6000},
    "sort": {"size": "small", "dropout": 0.0, "factor": 0.1, "steps": 6000},
    "histogram": {"size": "small", "dropout": 0.0, "factor": 0.3, "steps": 10000},
    "dates": {"size": "small", "dropout": 0.0, "factor": 0.3, "steps": 4000,
              "target": 0.99},
    "sentiment": {"size": "small", "dropout": 0.0, "factor": 0.3, "steps": 4000},
}  # fmt: skip
# The paper's settings (§5.3, §5.4): dropout 0.1, the schedule's factor 1 and 4,000
# warm-up steps; slow to train at these sizes.
PAPER: dict[str, Any] = {"size": "small", "dropout": 0.1, "factor": 1.0, "warmup": 4000}
# --8<-- [end:RECIPES]


LEVELS = ("chars", "bytes")


# --8<-- [start:TextSettings]
@dataclass(frozen=True)
class TextSettings:
    """The text recipe: model size, context, optimisation, when to stop.

    The defaults train 4 blocks of width 128 (0.8 M parameters, the size of nanoGPT's
    CPU baby GPT) on 64 characters of context, until the validation loss is
    ``target`` bits per character.
    """

    level: str = "chars"  # "chars" or "bytes": what one token is
    context: int = 64  # |seq|: characters the model reads at once
    layers: int = 4
    layer: int = 128  # |layer|
    heads: int = 4
    dropout: float = 0.0
    batch_size: int = 32
    steps: int = 3000  # at most this many steps
    warmup: int = 100
    factor: float = 0.5  # peak learning rate: factor / sqrt(|layer| * warmup)
    eval_every: int = 50
    eval_windows: int = 64  # validation windows scored at each evaluation
    target: float = 2.3  # stop at this validation loss, in bits per character
    max_seconds: float = 280.0  # ...or after this long (checked every step)
    sample_every: int = 4  # a sample at the first evaluation, then every 4th (0: none)
    sample_length: int = 300  # characters sampled once trained (0: no sample)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {self.level!r}")
        for name in ("context", "layers", "layer", "heads", "batch_size", "steps",
                     "eval_every", "eval_windows"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.target <= 0 or self.max_seconds <= 0:
            raise ValueError("target and max_seconds must be positive")
        if self.sample_length < 0:
            raise ValueError(f"sample_length must be >= 0, got {self.sample_length}")

    def config(self) -> TransformerConfig:
        """The model's config: GPT-2's pre-norm blocks and GELU, at this size."""
        # imported here: the command line's parser reads these settings without torch
        from named_transformer.models.config import TransformerConfig

        return TransformerConfig(
            decoder_layers=self.layers, layer=self.layer, heads=self.heads,
            hidden=4 * self.layer, dropout=self.dropout, activation="gelu",
            norm_first=True,
        )  # fmt: skip


# --8<-- [end:TextSettings]


# The command line: `train text` shares the train command's parser (cli.py adds these
# options to it and hands ``task == "text"`` to text.train_text_command).
_FLAGS = {"steps": "steps", "batch_size": "batch_size", "warmup": "warmup",
          "factor": "factor", "dropout": "dropout", "eval_every": "eval_every",
          "seed": "seed", "level": "level", "context": "context",
          "target_bpc": "target", "max_seconds": "max_seconds"}  # fmt: skip
"""Each flag's dest -> the TextSettings field it sets (``--target-bpc``: ``target``,
since ``--target`` would set the generated tasks' RunSettings.target too)."""


def add_text_options(train: Any) -> None:
    """The options of ``train text`` (an argparse parser): the corpus, the token level,
    the context and the validation target; ``--max-seconds`` caps the time (of the
    generated tasks too)."""
    defaults = TextSettings()
    add = train.add_argument
    add("--corpus", help="text: a UTF-8 file to learn (default: pydoc_data's topics)")
    add("--level", choices=LEVELS, default=defaults.level,
        help="text: one token a character or a byte")  # fmt: skip
    add("--context", type=int, default=defaults.context,
        help="text: characters the model reads at once")  # fmt: skip
    add("--target-bpc", type=float, default=defaults.target,
        help="text: stop at this validation loss, in bits per character")  # fmt: skip
    add("--max-seconds", type=float, default=None,
        help=f"stop after this many seconds, checked every step (text: "
             f"{defaults.max_seconds:g}; the generated tasks: no limit)")  # fmt: skip


def text_settings(args: Any) -> TextSettings:
    """The recipe with every flag of ``args`` that was given (or has a default)."""
    given = {field: getattr(args, dest) for dest, field in _FLAGS.items()
             if getattr(args, dest, None) is not None}  # fmt: skip
    return TextSettings(**given)
