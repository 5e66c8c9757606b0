"""Checks of the page "Attention as a soft dictionary": ``attend``."""

from __future__ import annotations

from named_transformer.exercises.checks._references import _mm, _softmax
from named_transformer.exercises.checks._support import (
    Check,
    _close,
    _randn,
    _rejects,
)


def attend_matches_equation(impl: Check) -> None:
    """alpha ·seq V: each query's weighted average of the values."""
    for seq_q, seq in ((4, 4), (3, 5)):  # square first: alpha^T V runs
        weights = _softmax(_randn(2, seq_q, seq, seed=seq_q))
        values = _randn(2, seq, 6, seed=seq)
        _close(impl(weights, values), _mm(weights, values), "alpha·V along seq",
               f"for {seq_q} queries over {seq} keys")  # fmt: skip


def attend_wrong_shape(impl: Check) -> None:
    """Values over another number of positions are a shape error naming seq."""
    _rejects(lambda: impl(_randn(2, 3, 5), _randn(2, 4, 6)),
             "weights over 5 keys with 4 values")  # fmt: skip


CHECKS: dict[str, tuple[Check, ...]] = {
    "attend": (attend_matches_equation, attend_wrong_shape),
}
