"""The references: the equations written again in plain matrix products, independent
of the library, and the inputs that make float32 scores large but exact."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from einops import rearrange
from torch import Tensor

from named_transformer.exercises.checks._support import DTYPE, LARGE, _dyadic, _randn


def _mm(a: Tensor, b: Tensor) -> Tensor:
    return a @ b  # allow-raw: the references are plain matrix products


def _mt(a: Tensor) -> Tensor:
    return rearrange(a, "... m n -> ... n m")


def _softmax(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """torch.softmax along seq, -inf where masked; a row with nothing left: zeros."""
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.softmax(scores, -1).nan_to_num(0.0)


def _scaled_scores(queries: Tensor, keys: Tensor) -> Tensor:
    return _mm(queries, _mt(keys)) / math.sqrt(queries.shape[-1])


def _causal(seq_q: int, seq: int, offset: int = 0) -> Tensor:
    return torch.ones(seq_q, seq, dtype=torch.bool).tril(offset)


def _some_masked(*shape: int, seed: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(*shape, generator=generator) > 0.4
    mask[..., 0] = True  # every row keeps one position
    return mask


def _key_padding(lengths: list[int], seq: int) -> Tensor:
    """A (batch, 1, seq) mask: the first lengths[b] keys of each sequence."""
    padding = torch.arange(seq) < rearrange(torch.tensor(lengths), "b -> b 1")
    return rearrange(padding, "b seq -> b 1 seq")


def _heads(inputs: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``inputs`` (... seq layer) times each head's (layer key) matrix, plus each
    head's bias."""
    projected = _mm(rearrange(inputs, "... seq layer -> ... 1 seq layer"), weight)
    if bias is None:
        return projected
    return projected + rearrange(bias, "heads key -> heads 1 key")


def _merge(heads_out: Tensor, w_o: Tensor, b_o: Tensor | None = None) -> Tensor:
    """Concatenate the heads (heads-major), then one linear map: Vaswani's W^O."""
    concatenated = rearrange(heads_out, "... heads seq val -> ... seq (heads val)")
    w_flat = rearrange(w_o, "heads val layer -> (heads val) layer")
    merged = _mm(concatenated, w_flat)
    return merged if b_o is None else merged + b_o


def _rotated(heads: Tensor, base: float, offset: int = 0) -> Tensor:
    """RoPE from its equation: pair i, the channels i and i + |key|/2 read as the
    complex number x_i + i·y_i, multiplied by exp(i·s·θ_i) at position s (from
    ``offset``), θ_i = base^(-2i/|key|)."""
    seq, key = heads.shape[-2], heads.shape[-1]
    pairs = key // 2
    theta = base ** (-2.0 * torch.arange(pairs, dtype=torch.float64) / key)
    positions = offset + torch.arange(seq, dtype=torch.float64)
    angles = rearrange(positions, "s -> s 1") * rearrange(theta, "p -> 1 p")
    turn = torch.polar(torch.ones_like(angles), angles)
    turned = torch.complex(heads[..., :pairs].double(), heads[..., pairs:].double())
    turned = turned * turn
    halves = rearrange([turned.real, turned.imag], "two ... s p -> ... s (two p)")
    return halves.to(heads.dtype)


def _linear_biases(heads: int, seq_q: int, seq: int, offset: int = 0) -> Tensor:
    """ALiBi's (heads, seq_q, seq) table: -m_h·(j - i) for the query at position j
    (from ``offset``) and the key at i, slopes m_h = 2^(-8h/n), h = 1 … n (n a power
    of two)."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1, dtype=DTYPE) / heads)
    queries = offset + torch.arange(seq_q, dtype=DTYPE)
    distance = rearrange(queries, "q -> q 1") - rearrange(
        torch.arange(seq, dtype=DTYPE), "k -> 1 k"
    )
    return -rearrange(slopes, "h -> h 1 1") * distance


def _multihead(
    inputs: Tensor,
    memory: Tensor,
    weights: Sequence[Tensor],
    mask: Tensor | None = None,
    *,
    score_bias: Tensor | None = None,
    rotary: float | None = None,
    alibi: bool = False,
    offset: int = 0,
) -> tuple[Tensor, Tensor]:
    """Vaswani's multi-head attention, (output, each head's weights); ``weights`` are
    W^Q, W^K, W^V, W^O, then b^Q, b^K, b^V, b^O if given. ``rotary`` (a base) rotates
    the queries from position ``offset`` and the keys from 0; ``alibi`` adds the
    linear biases of the queries from ``offset``."""
    w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o = [*weights, None, None, None, None][:8]
    queries, keys = _heads(inputs, w_q, b_q), _heads(memory, w_k, b_k)
    values = _heads(memory, w_v, b_v)
    if rotary is not None:
        queries, keys = _rotated(queries, rotary, offset), _rotated(keys, rotary)
    scores = _scaled_scores(queries, keys)
    if alibi:  # one table per head
        scores = scores + _linear_biases(
            w_q.shape[0], queries.shape[-2], keys.shape[-2], offset
        ).to(scores.dtype)
    if score_bias is not None:  # shared by all heads
        scores = scores + rearrange(score_bias, "... seq_q seq -> ... 1 seq_q seq")
    if mask is not None:
        mask = rearrange(mask, "... seq_q seq -> ... 1 seq_q seq")
    weights = _softmax(scores, mask)
    return _merge(_mm(weights, values), w_o, b_o), weights


def _head_weights(layer: int, memory: int, seed: int) -> list[Tensor]:
    """W^Q, W^K, W^V, W^O of 2 heads, keys 3 and values 5 wide: every width differs."""
    heads, key, val = 2, 3, 5
    shapes = [(heads, layer, key), (heads, memory, key), (heads, memory, val),
              (heads, val, layer)]  # fmt: skip
    return [_randn(*shape, seed=seed + n) for n, shape in enumerate(shapes)]


def _rotary_weights(layer: int, memory: int, seed: int) -> list[Tensor]:
    """W^Q, W^K, W^V, W^O of 2 heads, keys 4 wide (rotary positions turn pairs of
    key channels) and values 8 wide (even too, so that rotating them by mistake
    runs)."""
    heads, key, val = 2, 4, 8
    shapes = [(heads, layer, key), (heads, memory, key), (heads, memory, val),
              (heads, val, layer)]  # fmt: skip
    return [_randn(*shape, seed=seed + n) for n, shape in enumerate(shapes)]


# Large scores, exact in float32: one coordinate carries ±2·LARGE, and the key
# width is 4, so dividing by √|key| = 2 is exact and every score is ±LARGE plus a
# small number on a grid that float32 holds exactly next to LARGE.
def _large_queries_keys(seq_q: int, seq: int, seed: int) -> tuple[Tensor, Tensor]:
    """Float32 queries and keys whose scaled scores are about +LARGE for the even
    queries and -LARGE for the odd ones (a row of them underflows exp to 0)."""
    queries, keys = _dyadic(2, seq_q, 4, seed=seed), _dyadic(2, seq, 4, seed=seed + 1)
    signs = 1 - 2 * (torch.arange(seq_q) % 2)
    queries[..., 0] = 2 * LARGE * signs
    keys[..., 0] = 1.0
    return queries, keys


def _large_head_weights(seed: int) -> tuple[Tensor, list[Tensor]]:
    """Inputs (2, 4, 6) and float32 W^Q, W^K, W^V, W^O of 2 heads (keys 4, values 5
    wide) whose scaled self-attention scores are about +LARGE in head 0, -LARGE in
    head 1: the inputs' first feature is 1, and W^Q and W^K carry it to one key
    coordinate as ±2·LARGE and 1; three other features are copied to the others."""
    inputs = _dyadic(2, 4, 6, seed=seed)
    inputs[..., 0] = 1.0
    w_q, w_k = torch.zeros(2, 6, 4), torch.zeros(2, 6, 4)
    for head, (sign, first) in enumerate([(1, 1), (-1, 3)]):
        w_q[head, 0, 0], w_k[head, 0, 0] = sign * 2 * LARGE, 1.0
        w_q[head, first : first + 3, 1:] = torch.eye(3)
        w_k[head, first : first + 3, 1:] = torch.eye(3)
    w_v, w_o = _dyadic(2, 6, 5, seed=seed + 1), _dyadic(2, 5, 6, seed=seed + 2)
    return inputs, [w_q, w_k, w_v, w_o]
