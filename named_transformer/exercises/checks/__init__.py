r"""The checks of every exercise: one function per property, parametrised over the
implementation under test, one module per docs page (as the learner's files are).

A check takes ``impl``, a callable with the library function's signature, and either
returns (the property holds), raises an ``AssertionError`` whose message says in the
learner's words what is wrong ("rows of the weights do not sum to 1 along seq"), or
lets the shape error of :func:`~named_transformer.axes.checked` through (its first line
names the axis). The library's own test suite runs the same checks against the
library's functions (``tests/test_exercises.py``): they are one test code, not two.

Each check tests one promise of its function's docstring: the equation, each option
(a mask, a bias, an offset), and where the docstring says so, that a row with nothing
to attend is zeros with zero gradient, never NaN, and that scores of ±2e4 in float32
(which overflow ``exp``) give the same weights as small ones.

References are written independently of the library: PyTorch's own functions where
there is one (``torch.softmax``, ``scaled_dot_product_attention``, ``layer_norm``,
``torch.gru_cell``), otherwise the equation in plain matrix products. Sizes are tiny
and seeded, the property checks draw theirs with hypothesis (the same draws on every
run, a failure shrunk to the smallest sizes), and the axes that could be confused have
different lengths, so a mix-up shows as a wrong number or a shape error rather than
passing by accident.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from named_transformer.exercises.checks import (
    bahdanau,
    basic_self_attention,
    building_blocks,
    decoding,
    encoder_decoder,
    look_inside,
    masks,
    multihead_attention,
    notation,
    positions,
    scores,
    soft_dictionary,
)
from named_transformer.exercises.checks._support import DTYPE, TOLERANCE, Check

__all__ = ["CHECKS", "DTYPE", "TOLERANCE", "Check"]

_PAGES: tuple[ModuleType, ...] = (
    notation, soft_dictionary, basic_self_attention, scores, masks, building_blocks,
    multihead_attention, positions, encoder_decoder, bahdanau, look_inside, decoding,
)  # fmt: skip

CHECKS: dict[str, tuple[Check, ...]] = {
    name: checks for page in _PAGES for name, checks in page.CHECKS.items()
}
"""Each exercise's checks, in the order they run (the first failure is reported)."""


def __getattr__(name: str) -> Any:
    """A check by name, ``checks.softmax_masked``, as when the checks were one
    module."""
    for page in _PAGES:
        if not name.startswith("_") and hasattr(page, name):
            return getattr(page, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
