"""Checks of the page "Queries, keys, values and the score zoo": the six scores, then
``attention_weights`` and ``attention``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from named_transformer.exercises.checks._references import (
    _causal,
    _key_padding,
    _large_queries_keys,
    _mm,
    _mt,
    _scaled_scores,
    _softmax,
)
from named_transformer.exercises.checks._support import (
    TOLERANCE,
    Check,
    _close,
    _dyadic,
    _for_drawn_sizes,
    _randn,
    _rejects,
    _stable,
    _zeros_and_zero_gradient,
)


# --- the score zoo ------------------------------------------------------------------
def dot_score_matches_equation(impl: Check) -> None:
    """Q ·key K, one score per (query, key) pair."""
    queries, keys = _randn(2, 3, 4, seed=7), _randn(2, 5, 4, seed=8)
    _close(impl(queries, keys), _mm(queries, _mt(keys)), "Q·K along key")


def dot_score_wrong_shape(impl: Check) -> None:
    """Queries and keys of different widths are a shape error naming key."""
    _rejects(lambda: impl(_randn(2, 3, 4), _randn(2, 5, 6)),
             "queries with key 4 and keys with key 6")  # fmt: skip


def scaled_dot_score_matches_equation(impl: Check) -> None:
    """Q ·key K / √|key|."""
    queries, keys = _randn(2, 3, 4, seed=9), _randn(2, 5, 4, seed=10)
    _close(impl(queries, keys), _scaled_scores(queries, keys),
           "Q·K/√|key|")  # fmt: skip


def scaled_dot_score_wrong_shape(impl: Check) -> None:
    """Keys with another batch are a shape error."""
    _rejects(lambda: impl(_randn(2, 3, 4), _randn(3, 5, 4)),
             "queries with batch 2 and keys with batch 3")  # fmt: skip


def general_score_matches_equation(impl: Check) -> None:
    """Q ·key' W ·key K: W maps the query's key' axis onto the keys' key axis."""
    queries, keys = _randn(2, 3, 6, seed=11), _randn(2, 5, 4, seed=12)
    weight = _randn(6, 4, seed=13)
    expected = _mm(_mm(queries, weight), _mt(keys))
    _close(impl(queries, keys, weight), expected, "Q·W·K")


def general_score_wrong_shape(impl: Check) -> None:
    """A transposed W (key, key') is a shape error."""
    _rejects(lambda: impl(_randn(2, 3, 6), _randn(2, 5, 4), _randn(4, 6)),
             "W of shape (key, key') instead of (key', key)")  # fmt: skip


def additive_score_matches_equation(impl: Check) -> None:
    """w ·hidden tanh(W1 ·key' Q + W2 ·key K), summed over hidden."""
    queries, keys = _randn(2, 3, 6, seed=14), _randn(2, 5, 4, seed=15)
    w_query, w_key, w_score = _randn(7, 6, seed=16), _randn(7, 4, seed=17), _randn(7)
    q = rearrange(_mm(queries, _mt(w_query)), "... seq_q h -> ... seq_q 1 h")
    k = rearrange(_mm(keys, _mt(w_key)), "... seq h -> ... 1 seq h")
    expected = _mm(torch.tanh(q + k), w_score)
    _close(impl(queries, keys, w_query, w_key, w_score), expected,
           "w·tanh(W1·Q + W2·K)")  # fmt: skip


def additive_score_wrong_shape(impl: Check) -> None:
    """w_score of another hidden width is a shape error naming hidden."""
    _rejects(
        lambda: impl(_randn(2, 3, 6), _randn(2, 5, 4), _randn(7, 6), _randn(7, 4),
                     _randn(8)),
        "w_score with hidden 8 for W1 and W2 with hidden 7",
    )  # fmt: skip


def _cosine(queries: Tensor, keys: Tensor, eps: float = 1e-8) -> Tensor:
    return F.cosine_similarity(
        rearrange(queries, "b seq_q key -> b seq_q 1 key"),
        rearrange(keys, "b seq key -> b 1 seq key"),
        -1,
        eps,
    )


def cosine_score_matches_torch(impl: Check) -> None:
    """The cosine of the angle between each query and each key."""
    queries, keys = _randn(2, 3, 4, seed=18), _randn(2, 5, 4, seed=19)
    _close(impl(queries, keys), _cosine(queries, keys),
           "torch's cosine_similarity of each pair")  # fmt: skip


def cosine_score_clamps_the_norms(impl: Check) -> None:
    """Each norm is clamped below by ``eps``, as in cosine_similarity: a query of
    norm 0 scores 0, not NaN, and short queries are divided by eps."""
    queries, keys = _randn(2, 3, 4, seed=18) / 10, _randn(2, 5, 4, seed=19)
    queries[0, 1] = 0.0
    scores = impl(queries, keys)
    if isinstance(scores, Tensor) and bool(scores.isnan().any()):
        raise AssertionError(
            "gives NaN for a query of norm 0: clamp each norm below by eps, as "
            "torch's cosine_similarity does"
        )
    _close(scores, _cosine(queries, keys), "torch's cosine_similarity of each pair",
           "with a query of norm 0")  # fmt: skip
    _close(impl(queries, keys, 0.5), _cosine(queries, keys, 0.5),
           "torch's cosine_similarity with eps=0.5",
           "for queries of norm about 0.2: clamp each norm below by eps")  # fmt: skip


def cosine_score_wrong_shape(impl: Check) -> None:
    """Queries and keys of different widths are a shape error."""
    _rejects(lambda: impl(_randn(3, 4), _randn(5, 3)),
             "queries with key 4 and keys with key 3")  # fmt: skip


def location_score_matches_equation(impl: Check) -> None:
    """W_a ·hidden s: one score per source position, from the query alone."""
    queries, weight = _randn(2, 3, 4, seed=20), _randn(5, 4, seed=21)
    _close(impl(queries, weight), _mm(queries, _mt(weight)), "W_a·s")


def location_score_wrong_shape(impl: Check) -> None:
    """A weight of another hidden width is a shape error."""
    _rejects(lambda: impl(_randn(2, 3, 4), _randn(5, 6)),
             "a weight with hidden 6 for queries with hidden 4")  # fmt: skip


# --- the Transformer's attention ---------------------------------------------------
def _qkv(seed: int, seq_q: int = 3, seq: int = 5) -> tuple[Tensor, Tensor, Tensor]:
    return (_randn(2, seq_q, 4, seed=seed), _randn(2, seq, 4, seed=seed + 1),
            _randn(2, seq, 6, seed=seed + 2))  # fmt: skip


def _one_query_blocked(seq_q: int = 3, seq: int = 5) -> Tensor:
    """A (2, seq_q, seq) causal mask in which query 1 of sequence 0 may attend no
    key."""
    mask = _causal(seq_q, seq, seq - seq_q).repeat(2, 1, 1)
    mask[0, 1] = False
    return mask


def attention_weights_match_equation(impl: Check) -> None:
    """softmax(Q·K/√|key|) along seq."""
    queries, keys, _ = _qkv(25)
    _close(impl(queries, keys), _softmax(_scaled_scores(queries, keys)),
           "softmax(Q·K/√|key|) along seq")  # fmt: skip


def attention_weights_rows_sum_to_one(impl: Check) -> None:
    """Every row is a distribution over seq (sizes drawn by hypothesis)."""

    def prop(batch: int, seq_q: int, seq: int) -> None:
        weights = impl(_randn(batch, seq_q, 4, seed=seq), _randn(batch, seq, 4))
        off = (weights.sum(-1) - 1).abs().max().item()
        if not off <= TOLERANCE:
            raise AssertionError(
                f"rows of the weights do not sum to 1 along seq (off by {off:.3g} "
                f"for {seq_q} queries and {seq} keys)"
            )

    _for_drawn_sizes(prop)


def attention_weights_causal(impl: Check) -> None:
    """With a causal mask: zero above the diagonal, the rest renormalised."""
    queries, keys, _ = _qkv(27, seq_q=4, seq=4)
    mask = _causal(4, 4)
    _close(impl(queries, keys, mask), _softmax(_scaled_scores(queries, keys), mask),
           "softmax(Q·K/√|key| + M)", "with a causal mask")  # fmt: skip


def attention_weights_score_bias(impl: Check) -> None:
    """``score_bias`` is added to the scaled scores before the softmax."""
    queries, keys, _ = _qkv(28)
    bias = _randn(3, 5, seed=29)
    _close(impl(queries, keys, score_bias=bias),
           _softmax(_scaled_scores(queries, keys) + bias),
           "softmax(Q·K/√|key| + B)", "with a score bias")  # fmt: skip


def attention_weights_fully_blocked(impl: Check) -> None:
    """A query whose every key is blocked, by the mask or by a score bias of -inf,
    gets all zeros, never NaN, and zero gradient."""
    queries, keys, _ = _qkv(26)
    scores, mask = _scaled_scores(queries, keys), _one_query_blocked()
    differentiable = {"queries": queries, "keys": keys}
    weights = _zeros_and_zero_gradient(
        lambda q, k: impl(q, k, mask), differentiable, (0, 1),
        "a query whose every key is masked",
    )  # fmt: skip
    _close(weights, _softmax(scores, mask), "softmax(Q·K/√|key| + M)",
           "for the other queries, one query fully masked")  # fmt: skip
    bias = torch.zeros(3, 5).masked_fill(~_causal(3, 5, 2), -math.inf)
    bias[1] = -math.inf
    weights = _zeros_and_zero_gradient(
        lambda q, k: impl(q, k, score_bias=bias), differentiable, (0, 1),
        "a query whose every key has a score bias of -inf",
    )  # fmt: skip
    _close(weights, _softmax(scores + bias), "softmax(Q·K/√|key| + B)",
           "for the other queries, one query's bias all -inf")  # fmt: skip


def attention_weights_stable_at_large_scores(impl: Check) -> None:
    """Scaled scores of about ±2e4 in float32: no overflow, with or without a mask."""
    queries, keys = _large_queries_keys(3, 5, seed=24)
    expected = _scaled_scores(queries.double(), keys.double())
    _stable(impl(queries, keys), _softmax(expected), "softmax(Q·K/√|key|)")
    mask = _causal(3, 5, 2)
    _stable(impl(queries, keys, mask), _softmax(expected, mask),
            "softmax(Q·K/√|key| + M), with a causal mask,")  # fmt: skip


def attention_weights_wrong_shape(impl: Check) -> None:
    """A mask over another number of keys is a shape error naming seq."""
    queries, keys, _ = _qkv(30)
    _rejects(lambda: impl(queries, keys, _causal(3, 4)),
             "a mask over 4 keys for 5 keys")  # fmt: skip


def attention_matches_sdpa(impl: Check) -> None:
    """Equal to PyTorch's scaled_dot_product_attention, unmasked."""
    queries, keys, values = _qkv(31)
    _close(impl(queries, keys, values),
           F.scaled_dot_product_attention(queries, keys, values),
           "scaled_dot_product_attention", "without a mask")  # fmt: skip


def attention_causal_matches_sdpa(impl: Check) -> None:
    """Equal to scaled_dot_product_attention with a causal mask."""
    queries, keys, values = _qkv(32, seq_q=4, seq=4)
    _close(impl(queries, keys, values, _causal(4, 4)),
           F.scaled_dot_product_attention(queries, keys, values, is_causal=True),
           "scaled_dot_product_attention", "with a causal mask")  # fmt: skip


def attention_padding_matches_sdpa(impl: Check) -> None:
    """Equal to scaled_dot_product_attention with a key padding mask (batch 1 seq)."""
    queries, keys, values = _qkv(33)
    mask = _key_padding([3, 5], 5)
    _close(impl(queries, keys, values, mask),
           F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask),
           "scaled_dot_product_attention", "with a padding mask")  # fmt: skip


def attention_score_bias_matches_sdpa(impl: Check) -> None:
    """``score_bias`` B is added to the scaled scores: SDPA's float attn_mask."""
    queries, keys, values = _qkv(34)
    bias = _randn(3, 5, seed=35)
    _close(impl(queries, keys, values, score_bias=bias),
           F.scaled_dot_product_attention(queries, keys, values, attn_mask=bias),
           "scaled_dot_product_attention", "with a score bias")  # fmt: skip


def attention_fully_masked_query(impl: Check) -> None:
    """A query with no allowed key returns zeros, never NaN, and zero gradient."""
    queries, keys, values = _qkv(36)
    mask = _one_query_blocked()
    outputs = _zeros_and_zero_gradient(
        lambda q, k, v: impl(q, k, v, mask),
        {"queries": queries, "keys": keys, "values": values}, (0, 1),
        "a query with no allowed key",
    )  # fmt: skip
    expected = _mm(_softmax(_scaled_scores(queries, keys), mask), values)
    _close(outputs, expected, "softmax(Q·K/√|key| + M)·V",
           "for the other queries, one query fully masked")  # fmt: skip


def attention_stable_at_large_scores(impl: Check) -> None:
    """Scaled scores of about ±2e4 in float32: no overflow, with a causal mask."""
    queries, keys = _large_queries_keys(3, 5, seed=37)
    values, mask = _dyadic(2, 5, 6, seed=38), _causal(3, 5, 2)
    weights = _softmax(_scaled_scores(queries.double(), keys.double()), mask)
    _stable(impl(queries, keys, values, mask), _mm(weights, values.double()),
            "softmax(Q·K/√|key| + M)·V")  # fmt: skip


def attention_wrong_shape(impl: Check) -> None:
    """Keys and values over different numbers of positions are a shape error."""
    _rejects(lambda: impl(_randn(2, 3, 4), _randn(2, 5, 4), _randn(2, 6, 6)),
             "5 keys with 6 values")  # fmt: skip


CHECKS: dict[str, tuple[Check, ...]] = {
    "dot_score": (dot_score_matches_equation, dot_score_wrong_shape),
    "scaled_dot_score": (scaled_dot_score_matches_equation,
                         scaled_dot_score_wrong_shape),
    "general_score": (general_score_matches_equation, general_score_wrong_shape),
    "additive_score": (additive_score_matches_equation, additive_score_wrong_shape),
    "cosine_score": (cosine_score_matches_torch, cosine_score_clamps_the_norms,
                     cosine_score_wrong_shape),
    "location_score": (location_score_matches_equation, location_score_wrong_shape),
    "attention_weights": (attention_weights_match_equation,
                          attention_weights_rows_sum_to_one, attention_weights_causal,
                          attention_weights_score_bias,
                          attention_weights_fully_blocked,
                          attention_weights_stable_at_large_scores,
                          attention_weights_wrong_shape),
    "attention": (attention_matches_sdpa, attention_causal_matches_sdpa,
                  attention_padding_matches_sdpa, attention_score_bias_matches_sdpa,
                  attention_fully_masked_query, attention_stable_at_large_scores,
                  attention_wrong_shape),
}  # fmt: skip
