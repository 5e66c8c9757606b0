"""Checks of the page "Decode: greedy, beam search, sampling, and the key/value
cache": ``cached_self_attention``."""

from __future__ import annotations

import torch
from torch import Tensor

from named_transformer.exercises.checks._references import (
    _causal,
    _head_weights,
    _heads,
    _large_head_weights,
    _multihead,
)
from named_transformer.exercises.checks._support import (
    Check,
    _close,
    _randn,
    _rejects,
    _stable,
    _unpack,
)

_STEP = "outputs, new keys, new values"


def _recomputed(inputs: Tensor, weights: list[Tensor]) -> Tensor:
    """Causal self-attention over the whole prefix, recomputed: the cache's target."""
    seq = inputs.shape[-2]
    return _multihead(inputs, inputs, weights, _causal(seq, seq))[0]


def _after_a_cache_of_two(impl: Check, inputs: Tensor, weights: list[Tensor]) -> tuple:
    """The step for the positions 2, 3, … of ``inputs``, the first two cached."""
    w_k, w_v = weights[1], weights[2]
    cached, new = inputs[:, :2], inputs[:, 2:]
    return _unpack(impl(new, _heads(cached, w_k), _heads(cached, w_v), *weights),
                   _STEP)  # fmt: skip


def cached_self_attention_token_by_token(impl: Check) -> None:
    """One token at a time from an empty cache, appending each step's keys and
    values: the rows of causal self-attention recomputed over the whole prefix."""
    inputs, weights = _randn(2, 5, 6, seed=64), _head_weights(6, 6, 60)
    keys, values = _randn(2, 2, 0, 3), _randn(2, 2, 0, 5)
    rows = []
    for j in range(inputs.shape[-2]):
        out, new_keys, new_values = _unpack(
            impl(inputs[:, j : j + 1], keys, values, *weights), _STEP
        )
        rows.append(out)
        keys = torch.cat([keys, new_keys], -2)  # allow-raw: the caller's cache
        values = torch.cat([values, new_values], -2)  # allow-raw: the caller's cache
    _close(torch.cat(rows, -2), _recomputed(inputs, weights),  # allow-raw: the rows
           "causal self-attention recomputed over the whole prefix",
           "when 5 tokens are decoded one at a time from an empty cache")  # fmt: skip


def cached_self_attention_several_new(impl: Check) -> None:
    """Three new positions after a cache of two: the causal mask sits at offset 2, so
    a new position does not see the new positions after it."""
    inputs, weights = _randn(2, 5, 6, seed=65), _head_weights(6, 6, 60)
    out, new_keys, new_values = _after_a_cache_of_two(impl, inputs, weights)
    new, w_k, w_v = inputs[:, 2:], weights[1], weights[2]
    _close(new_keys, _heads(new, w_k), "the new positions' keys W^K·X")
    _close(new_values, _heads(new, w_v), "the new positions' values W^V·X")
    _close(out, _recomputed(inputs, weights)[:, 2:],
           "causal self-attention recomputed over the whole prefix",
           "for 3 new positions after a cache of 2 "
           "(the causal mask at offset 2)")  # fmt: skip


def cached_self_attention_stable_at_large_scores(impl: Check) -> None:
    """Head 0's scores about +2e4, head 1's about -2e4, in float32: no overflow."""
    inputs, weights = _large_head_weights(seed=61)
    out = _after_a_cache_of_two(impl, inputs, weights)[0]
    expected = _recomputed(inputs.double(), [w.double() for w in weights])[:, 2:]
    _stable(out, expected, "causal self-attention recomputed over the whole prefix")


def cached_self_attention_wrong_shape(impl: Check) -> None:
    """A cache of 3 heads for weights of 2 is a shape error naming heads."""
    _rejects(lambda: impl(_randn(2, 1, 6), _randn(2, 3, 2, 3), _randn(2, 3, 2, 5),
                          *_head_weights(6, 6, 60)),
             "a cache of 3 heads for weights of 2")  # fmt: skip


CHECKS: dict[str, tuple[Check, ...]] = {
    "cached_self_attention": (cached_self_attention_token_by_token,
                              cached_self_attention_several_new,
                              cached_self_attention_stable_at_large_scores,
                              cached_self_attention_wrong_shape),
}  # fmt: skip
