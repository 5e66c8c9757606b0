"""Checks of the page "Building blocks": ``standardize``, ``layer_norm``,
``feed_forward``, ``sinusoidal_positions``."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from named_transformer.exercises.checks._references import _mm, _mt
from named_transformer.exercises.checks._support import (
    DTYPE,
    Check,
    _close,
    _randn,
    _rejects,
    _same_gradient,
)


# --- layer normalisation ------------------------------------------------------------
def _standardized(
    inputs: Tensor, eps: float, *, eps_outside: bool = False, unbiased: bool = False
) -> Tensor:
    """(X - mean)/√(variance + eps) along layer, or one of two mistakes."""
    centred = inputs - inputs.mean(-1, keepdim=True)
    variance = inputs.var(-1, unbiased=unbiased, keepdim=True)
    if eps_outside:
        return centred / (variance.sqrt() + eps)
    return centred / (variance + eps).sqrt()


def _mistakes(
    inputs: Tensor, eps: float, then: Callable[[Tensor], Tensor] = lambda x: x
) -> list[tuple[Tensor, str]]:
    """What two known mistakes compute (followed by ``then``), and what to say."""
    return [
        (then(_standardized(inputs, eps, eps_outside=True)),
         "ε is added outside the square root, √variance + ε; put epsilon "
         "inside the square root, √(variance + ε)"),
        (then(_standardized(inputs, eps, unbiased=True)),
         "that is the unbiased variance, 1/(n − 1); "
         "layer normalisation divides by n"),
    ]  # fmt: skip


def standardize_matches_equation(impl: Check) -> None:
    """(X - mean) / sqrt(biased variance + eps), along layer."""
    inputs = _randn(2, 3, 5, seed=47)
    _close(impl(inputs), _standardized(inputs, 1e-5),
           "(X − mean)/√(variance + ε) along layer, biased (1/n) variance",
           mistakes=_mistakes(inputs, 1e-5))  # fmt: skip
    _close(impl(inputs, 0.5), _standardized(inputs, 0.5),
           "(X − mean)/√(variance + ε)", "with eps=0.5",
           mistakes=_mistakes(inputs, 0.5))  # fmt: skip


def standardize_gradient_matches_equation(impl: Check) -> None:
    """The gradient is that of the equation: the mean and the variance depend on X
    too (a written-out backward must agree with autograd's)."""
    _same_gradient(
        impl,
        lambda x: _standardized(x, 1e-5),
        _randn(2, 3, 5, seed=48),
        "(X − mean)/√(variance + ε) (the mean and variance depend on X)",
    )


def standardize_wrong_shape(impl: Check) -> None:
    """A 0-d input has no layer axis: a shape error."""
    _rejects(lambda: impl(torch.tensor(1.0, dtype=DTYPE)), "a 0-d input")


def layer_norm_matches_torch(impl: Check) -> None:
    """Equal to torch.nn.functional.layer_norm, with and without beta."""
    inputs, gamma, beta = _randn(2, 3, 5, seed=48), _randn(5, seed=49), _randn(5)
    _close(impl(inputs, gamma, beta), F.layer_norm(inputs, (5,), gamma, beta),
           "torch.nn.functional.layer_norm over layer (biased variance)",
           mistakes=_mistakes(inputs, 1e-5, lambda x: x * gamma + beta))  # fmt: skip
    _close(impl(inputs, gamma, None), F.layer_norm(inputs, (5,), gamma),
           "torch.nn.functional.layer_norm", "with beta=None")  # fmt: skip
    _close(impl(inputs, gamma, beta, 0.5),
           F.layer_norm(inputs, (5,), gamma, beta, 0.5),
           "torch.nn.functional.layer_norm", "with eps=0.5",
           mistakes=_mistakes(inputs, 0.5, lambda x: x * gamma + beta))  # fmt: skip


def layer_norm_wrong_shape(impl: Check) -> None:
    """A gamma of another width is a shape error naming layer."""
    _rejects(lambda: impl(_randn(2, 5), _randn(4), None),
             "gamma of width 4 for inputs 5 wide")  # fmt: skip


# --- the feed-forward network -------------------------------------------------------
def feed_forward_matches_equation(impl: Check) -> None:
    """W2 ·hidden relu(W1 ·layer X + b1) + b2; a bias of None is left out."""
    inputs, w1, b1 = _randn(2, 3, 4, seed=50), _randn(7, 4, seed=51), _randn(7)
    w2, b2 = _randn(4, 7, seed=52), _randn(4, seed=53)
    hidden = _mm(inputs, _mt(w1))
    _close(impl(inputs, w1, b1, w2, b2), _mm(torch.relu(hidden + b1), _mt(w2)) + b2,
           "W2·relu(W1·X + b1) + b2")  # fmt: skip
    _close(impl(inputs, w1, None, w2, None), _mm(torch.relu(hidden), _mt(w2)),
           "W2·relu(W1·X)", "with both biases None")  # fmt: skip
    gelu = _mm(F.gelu(hidden + b1), _mt(w2)) + b2
    _close(impl(inputs, w1, b1, w2, b2, F.gelu), gelu,
           "W2·gelu(W1·X + b1) + b2", "with activation=gelu")  # fmt: skip


def feed_forward_wrong_shape(impl: Check) -> None:
    """W2 not mapping back to layer is a shape error."""
    _rejects(lambda: impl(_randn(2, 4), _randn(7, 4), None, _randn(5, 7), None),
             "W2 mapping hidden to 5 features for inputs 4 wide")  # fmt: skip


# --- positional encodings -----------------------------------------------------------
def _sinusoids(seq: int, layer: int, offset: int = 0) -> Tensor:
    table = torch.zeros(seq, layer, dtype=DTYPE)
    for pos in range(offset, offset + seq):
        for channel in range(layer):
            angle = pos / 10000 ** ((channel - channel % 2) / layer)
            table[pos - offset, channel] = (
                math.sin(angle) if channel % 2 == 0 else math.cos(angle)
            )
    return table


def sinusoidal_positions_match_paper(impl: Check) -> None:
    """P[pos, 2i] = sin(pos/10000^(2i/layer)), P[pos, 2i+1] = cos(the same)."""
    _close(impl(6, 8, dtype=DTYPE), _sinusoids(6, 8),
           "P[pos, 2i] = sin(pos/10000^(2i/|layer|)), P[pos, 2i+1] = cos(…)",
           "for seq 6, layer 8")  # fmt: skip


def sinusoidal_positions_offset(impl: Check) -> None:
    """``offset`` shifts the positions: rows offset … offset + seq - 1."""
    _close(impl(3, 8, offset=4, dtype=DTYPE), _sinusoids(3, 8, offset=4),
           "the rows 4, 5, 6 of the table", "with offset=4")  # fmt: skip


def sinusoidal_positions_wrong_type(impl: Check) -> None:
    """A length that is not an int is a type error."""
    _rejects(lambda: impl(6.0, 8), "a length of 6.0")


def sinusoidal_positions_dtype(impl: Check) -> None:
    """The table has the dtype asked for: float32 by default."""
    for asked, table in ((torch.float32, impl(3, 4)),
                         (torch.float64, impl(3, 4, dtype=torch.float64))):  # fmt: skip
        if isinstance(table, Tensor) and table.dtype != asked:
            raise AssertionError(f"returns dtype {table.dtype} when asked for {asked}")


CHECKS: dict[str, tuple[Check, ...]] = {
    "standardize": (standardize_matches_equation,
                    standardize_gradient_matches_equation, standardize_wrong_shape),
    "layer_norm": (layer_norm_matches_torch, layer_norm_wrong_shape),
    "feed_forward": (feed_forward_matches_equation, feed_forward_wrong_shape),
    "sinusoidal_positions": (sinusoidal_positions_match_paper,
                             sinusoidal_positions_offset, sinusoidal_positions_dtype,
                             sinusoidal_positions_wrong_type),
}  # fmt: skip
