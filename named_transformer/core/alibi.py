r"""Attention with linear biases (ALiBi; Press, Smith & Lewis 2022, "Train Short,
Test Long").

ALiBi adds no position to the inputs and learns nothing: each head $h$ subtracts from
the score of a query at position $j$ and a key at position $i \le j$ a penalty
proportional to their distance, with a fixed slope $m_h$ of its own:

$$B_{\mathsf{heads}(h),\,\mathsf{seq'}(j),\,\mathsf{seq}(i)} = -m_h\,(j - i),
  \qquad \text{Attention}(Q, K, V, M, B).$$

$B \in \mathbb R^{\mathsf{heads} \times \mathsf{seq'} \times \mathsf{seq}}$ is the
additive score bias of :func:`~named_transformer.core.attention.attention`: one
$\mathsf{seq'} \times \mathsf{seq}$ table per head, lifted over the batch. Steep heads
look at the last few tokens, gentle ones far back; a key never seen at that distance
in training is merely penalised more (the paper's account of why ALiBi extrapolates
to longer inputs).

The slopes are a geometric sequence: for $n$ heads, $n$ a power of two,
$m_h = 2^{-8h/n}$, $h = 1 \dots n$ (8 heads: $\tfrac12, \tfrac14, \dots,
\tfrac1{256}$). For other $n$, with $n' = 2^{\lfloor \log_2 n \rfloor}$ the power
of two below, the paper (and BLOOM) take the $n'$ slopes of $n'$ heads, then every
other slope of $2n'$ heads, $2^{-8(2h-1)/(2n')}$ for $h = 1, 2, \dots$, until there
are $n$.

For a key *after* the query ($i > j$) the causal form gives $+m_h(i - j)$: a bonus,
harmless because the causal mask blocks those keys anyway. An encoder attends both
ways, so it takes the symmetric form $-m_h\,|j - i|$ (``symmetric=True``).
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from jaxtyping import Float, Int
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.contraction import einsum

__all__ = ["alibi_bias", "alibi_slopes"]


def _geometric(heads: int) -> list[float]:
    """$2^{-8h/n}$ for $h = 1 \\dots n$."""
    ratio = 2.0 ** (-8.0 / heads)
    return [ratio**h for h in range(1, heads + 1)]


# --8<-- [start:alibi_slopes]
@checked
def alibi_slopes(
    heads: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Float[Tensor, " heads"]:
    r"""The slopes $m_h$: $2^{-8h/n}$ for $n$ = ``heads`` a power of two, else the
    slopes of the power of two below and every other slope of the next one."""
    if heads < 1:
        raise ValueError(f"ALiBi needs at least one head, got heads={heads}")
    below = 2 ** math.floor(math.log2(heads))
    slopes = _geometric(below) + _geometric(2 * below)[0::2][: heads - below]
    return torch.tensor(slopes, dtype=dtype, device=device)


# --8<-- [end:alibi_slopes]


# --8<-- [start:alibi_bias]
@checked
def alibi_bias(
    seq_q: int,
    seq: int,
    slopes: Float[Tensor, " heads"],
    *,
    offset: int | Int[Tensor, " 1"] = 0,
    symmetric: bool = False,
) -> Float[Tensor, "heads seq_q seq"]:
    r"""$B_{h,j,i} = -m_h\,(j - i)$ for the query at position $j$ = ``offset`` + its
    index and the key at position $i$; $-m_h\,|j - i|$ if ``symmetric``.

    ``offset`` is the first query's position (the cache length when decoding step by
    step; a one-element tensor in the compiled decoder); the keys start at 0. The
    table follows the slopes' dtype and device.
    """
    queries = offset + torch.arange(seq_q, device=slopes.device)
    keys = torch.arange(seq, device=slopes.device)
    distance = rearrange(queries, "seq_q -> seq_q 1") - rearrange(keys, "seq -> 1 seq")
    if symmetric:
        distance = distance.abs()
    # negate the integers, not the product: the diagonal is then 0, not -0
    return einsum(
        slopes, (-distance).to(slopes.dtype), "heads, seq_q seq -> heads seq_q seq"
    )


# --8<-- [end:alibi_bias]
