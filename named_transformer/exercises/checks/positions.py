"""Checks of the page "Embeddings and positions": ``relative_attention_weights``."""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import Tensor

from named_transformer.exercises.checks._references import (
    _causal,
    _large_queries_keys,
    _scaled_scores,
    _softmax,
)
from named_transformer.exercises.checks._support import (
    Check,
    _close,
    _dyadic,
    _randn,
    _rejects,
    _stable,
)

# distances -2 … 2 between 3 queries and 5 keys: one row of a^K each
_INDEX = (torch.arange(5) - rearrange(torch.arange(3), "seq_q -> seq_q 1")).clamp(
    -2, 2
) + 2


def _relative_scores(queries: Tensor, keys: Tensor, a_k: Tensor) -> Tensor:
    """(Q·K + Q·R^K)/√|key|, R^K = a^K[index]."""
    per_pair = rearrange(queries, "b seq_q key -> b seq_q 1 key") * a_k[_INDEX]
    relative = per_pair.sum(-1)
    return _scaled_scores(queries, keys) + relative / math.sqrt(queries.shape[-1])


def relative_attention_weights_match_equation(impl: Check) -> None:
    """softmax((Q·K + Q·R^K)/√|key| + M), R^K = a^K[index] per (query, key) pair."""
    queries, keys = _randn(2, 3, 4, seed=54), _randn(2, 5, 4, seed=55)
    a_k = _randn(5, 4, seed=56)
    scores, mask = _relative_scores(queries, keys, a_k), _causal(3, 5, 2)
    _close(impl(queries, keys, a_k, _INDEX), _softmax(scores),
           "softmax((Q·K + Q·R^K)/√|key|)")  # fmt: skip
    _close(impl(queries, keys, a_k, _INDEX, mask), _softmax(scores, mask),
           "softmax((Q·K + Q·R^K)/√|key| + M)", "with a causal mask")  # fmt: skip


def relative_attention_weights_stable_at_large_scores(impl: Check) -> None:
    """Scores of about ±2e4 in float32: no overflow."""
    queries, keys = _large_queries_keys(3, 5, seed=57)
    a_k = _dyadic(5, 4, seed=59)
    a_k[:, 0] = 0.0  # the relative term stays small, so the scores stay exact
    scores = _relative_scores(queries.double(), keys.double(), a_k.double())
    _stable(impl(queries, keys, a_k, _INDEX, _causal(3, 5, 2)),
            _softmax(scores, _causal(3, 5, 2)),
            "softmax((Q·K + Q·R^K)/√|key| + M)")  # fmt: skip


def relative_attention_weights_wrong_shape(impl: Check) -> None:
    """An index over another number of keys is a shape error naming seq."""
    index = torch.zeros(3, 4, dtype=torch.long)
    _rejects(lambda: impl(_randn(2, 3, 4), _randn(2, 5, 4), _randn(5, 4), index),
             "an index over 4 keys for 5 keys")  # fmt: skip


CHECKS: dict[str, tuple[Check, ...]] = {
    "relative_attention_weights": (relative_attention_weights_match_equation,
                                   relative_attention_weights_stable_at_large_scores,
                                   relative_attention_weights_wrong_shape),
}  # fmt: skip
