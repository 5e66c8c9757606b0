"""Checks of the page "Named tensor notation": ``softmax``."""

from __future__ import annotations

import torch

from named_transformer.exercises.checks._references import _softmax, _some_masked
from named_transformer.exercises.checks._support import (
    LARGE,
    TOLERANCE,
    Check,
    _close,
    _dyadic,
    _for_drawn_sizes,
    _randn,
    _rejects,
    _shape,
    _stable,
    _zeros_and_zero_gradient,
)


def softmax_matches_torch(impl: Check) -> None:
    """Without a mask: torch.softmax along the last axis, seq."""
    scores = _randn(2, 3, 5)
    _close(impl(scores), torch.softmax(scores, -1), "torch.softmax along seq",
           f"on scores of shape {_shape(scores)}")  # fmt: skip


def softmax_rows_sum_to_one(impl: Check) -> None:
    """Each row of the weights is a distribution over seq (sizes drawn by
    hypothesis)."""

    def prop(batch: int, seq_q: int, seq: int) -> None:
        weights = impl(_randn(batch, seq_q, seq, seed=seq))
        sums = weights.sum(-1)
        off = (sums - 1).abs().max().item()
        if not off <= TOLERANCE or bool((weights < 0).any()):
            raise AssertionError(
                f"rows of the weights do not sum to 1 along seq (off by {off:.3g} "
                f"on scores of shape {(batch, seq_q, seq)})"
            )

    _for_drawn_sizes(prop)


def softmax_masked(impl: Check) -> None:
    """Masked positions (False) get weight exactly 0; the rest renormalise."""
    scores, mask = _randn(2, 3, 5, seed=2), _some_masked(2, 3, 5, seed=2)
    weights = impl(scores, mask)
    leaked = weights.masked_fill(mask, 0.0).abs().max().item()
    if leaked != 0:
        raise AssertionError(
            f"gives weight {leaked:.3g} to positions where the mask is False "
            "(True means 'may attend', False means blocked)"
        )
    _close(weights, _softmax(scores, mask), "torch.softmax with -inf where masked")


def softmax_fully_masked_row(impl: Check) -> None:
    """A row with every position masked returns zeros, never NaN, and zero
    gradient."""
    scores = _randn(2, 4, seed=3)
    mask = torch.tensor([[True, False, True, True], [False] * 4])
    weights = _zeros_and_zero_gradient(
        lambda leaf: impl(leaf, mask), {"scores": scores}, (1,),
        "a row with every position masked",
    )  # fmt: skip
    _close(weights, _softmax(scores, mask), "zeros for a fully masked row")


def softmax_beta(impl: Check) -> None:
    """``beta`` multiplies the scores: softmax(beta * X)."""
    scores = _randn(3, 4, seed=4)
    _close(impl(scores, None, 2.5), torch.softmax(2.5 * scores, -1),
           "torch.softmax(beta * scores)", "with beta=2.5")  # fmt: skip


def softmax_stable_at_large_scores(impl: Check) -> None:
    """Scores of about ±2e4 in float32, with and without a mask: no overflow, the
    same weights as the scores less their maximum."""
    offsets = _dyadic(2, 3, 5, seed=5)
    signs = torch.tensor([[1.0], [-1.0], [1.0]])
    mask = _some_masked(2, 3, 5, seed=5)
    _stable(impl(offsets + signs * LARGE), _softmax(offsets.double()),
            "torch.softmax along seq")  # fmt: skip
    _stable(impl(offsets + signs * LARGE, mask), _softmax(offsets.double(), mask),
            "torch.softmax with -inf where masked")  # fmt: skip


def softmax_wrong_shape(impl: Check) -> None:
    """A mask of another length is a shape error naming seq."""
    _rejects(lambda: impl(_randn(2, 3), torch.ones(2, 4, dtype=torch.bool)),
             "a mask with seq 4 for scores with seq 3")  # fmt: skip


CHECKS: dict[str, tuple[Check, ...]] = {
    "softmax": (softmax_matches_torch, softmax_rows_sum_to_one, softmax_masked,
                softmax_fully_masked_row, softmax_beta, softmax_stable_at_large_scores,
                softmax_wrong_shape),
}  # fmt: skip
