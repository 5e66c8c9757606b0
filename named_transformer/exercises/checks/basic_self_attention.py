"""Checks of the page "Basic self-attention": ``basic_self_attention``."""

from __future__ import annotations

import torch
from torch import Tensor

from named_transformer.exercises.checks._references import _mm, _mt
from named_transformer.exercises.checks._support import (
    Check,
    _close,
    _dyadic,
    _for_drawn_sizes,
    _randn,
    _rejects,
    _stable,
)


def _equation(inputs: Tensor) -> Tensor:
    return _mm(torch.softmax(_mm(inputs, _mt(inputs)), -1), inputs)


def basic_self_attention_matches_equation(impl: Check) -> None:
    """softmax(X X^T) X, unscaled, along seq."""
    inputs = _randn(2, 4, 3, seed=5)
    _close(impl(inputs), _equation(inputs), "softmax(X·X)·X (no scaling, no weights)")


def basic_self_attention_permutation_equivariant(impl: Check) -> None:
    """Permuting the positions permutes the outputs the same way."""

    def prop(batch: int, seq: int, layer: int) -> None:
        inputs = _randn(batch, seq, layer, seed=seq)
        order = torch.randperm(seq, generator=torch.Generator().manual_seed(seq))
        _close(impl(inputs[:, order]), impl(inputs)[:, order],
               "the permuted outputs", "after permuting seq: it should be "
               "permutation equivariant")  # fmt: skip

    _for_drawn_sizes(prop)


def basic_self_attention_stable_at_large_scores(impl: Check) -> None:
    """Inputs whose first feature is 128: every score X·X is about 16384 in float32,
    and the softmax must not overflow."""
    inputs = _dyadic(2, 4, 3, seed=6)
    inputs[..., 0] = 128.0  # 128² = 16384; the rest keeps the scores exact
    _stable(impl(inputs), _equation(inputs.double()), "softmax(X·X)·X",
            "for scores X·X of about 1.6e4 in float32", 128.0**2)  # fmt: skip


def basic_self_attention_wrong_shape(impl: Check) -> None:
    """A vector with no seq axis is a shape error."""
    _rejects(lambda: impl(_randn(3)), "a 1-d input with no seq axis")


CHECKS: dict[str, tuple[Check, ...]] = {
    "basic_self_attention": (basic_self_attention_matches_equation,
                             basic_self_attention_permutation_equivariant,
                             basic_self_attention_stable_at_large_scores,
                             basic_self_attention_wrong_shape),
}  # fmt: skip
