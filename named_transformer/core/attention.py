r"""Scaled dot-product attention, equation by equation.

The named tensor paper (§4.3) writes attention for one query axis $\mathsf{seq'}$ over
key/value positions $\mathsf{seq}$:

$$\text{Attention}(Q, K, V, M) = \left(\nfun{seq}{softmax}
  \left(\frac{Q \ndot{key} K}{\sqrt{|\mathsf{key}|}} + M\right)\right) \ndot{seq} V$$

with $Q \in \mathbb R^{\mathsf{seq'} \times \mathsf{key}}$,
$K \in \mathbb R^{\mathsf{seq} \times \mathsf{key}}$,
$V \in \mathbb R^{\mathsf{seq} \times \mathsf{val}}$ and
$M \in \{0, -\infty\}^{\mathsf{seq'} \times \mathsf{seq}}$. An optional additive score
bias $B \in \mathbb R^{\mathsf{seq'} \times \mathsf{seq}}$ (``score_bias``: ALiBi's
distance penalty, or a Hugging Face mask filled with the dtype's most negative number)
joins the scores before the softmax:

$$\text{Attention}(Q, K, V, M, B) = \left(\nfun{seq}{softmax}
  \left(\frac{Q \ndot{key} K}{\sqrt{|\mathsf{key}|}} + B + M\right)\right)
  \ndot{seq} V.$$

An entry $-\infty$ of $B$ blocks its key as $M$ does. Every other axis (batch,
heads) is carried along untouched: the function is *lifted* over it. Keys and values
may carry a size-1 axis where queries carry a larger one (``#`` in the annotation): a
size-1 ``heads`` axis *is* multi-query attention.

Masks are booleans, True where attention is allowed, as in
`torch.nn.functional.scaled_dot_product_attention`. **`torch.nn.MultiheadAttention`
reads a boolean mask the other way round** (True = blocked): negate it when porting.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Bool, Float
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.core import fast
from named_transformer.core.blockwise import AUTOMATIC_RULE, blockwise_attention
from named_transformer.core.scores import scaled_dot_score
from named_transformer.core.softmax import softmax

__all__ = [
    "attend",
    "attention",
    "attention_from_scores",
    "attention_weights",
    "fused_attention",
]


def check_groups(heads: int, kv_heads: int) -> None:
    """A ``ValueError`` naming both numbers unless ``kv_heads`` divides ``heads``:
    each key/value head serves a group of ``heads / kv_heads`` query heads."""
    if kv_heads < 1 or heads % kv_heads != 0:
        raise ValueError(
            f"kv_heads={kv_heads} must divide heads={heads}: each key/value head "
            "serves a group of heads / kv_heads query heads"
        )


# --8<-- [start:attention_weights]
@checked
@fast.stand_in(fast.attention_weights)
def attention_weights(
    queries: Float[Tensor, "*batch seq_q key"],
    keys: Float[Tensor, "*#batch seq key"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    *,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> Float[Tensor, "*batch seq_q seq"]:
    r"""One distribution over $\mathsf{seq}$ per query.

    $$\nfun{seq}{softmax}\left(\frac{Q \ndot{key} K}{\sqrt{|\mathsf{key}|}}
      + B + M\right)$$

    ``score_bias`` is $B$ (none if None). Its $-\infty$ entries block as the mask does:
    a query whose every key is blocked, by $M$ or by $B$, gets all zeros, never NaN.
    """
    scores = scaled_dot_score(queries, keys)
    if score_bias is not None:  # B's -inf entries block their keys as M does
        scores = scores + score_bias
        allowed = scores != -torch.inf
        mask = allowed if mask is None else mask & allowed
        scores = scores.masked_fill(~allowed, 0.0)  # -inf moved from S + B into M
    return softmax(scores, mask)


# --8<-- [end:attention_weights]


# --8<-- [start:attend]
@checked
def attend(
    weights: Float[Tensor, "*batch seq_q seq"],
    values: Float[Tensor, "*#batch seq val"],
) -> Float[Tensor, "*batch seq_q val"]:
    r"""$A \ndot{seq} V$: each query's weighted average of the values."""
    return einsum(weights, values, "... seq_q seq, ... seq val -> ... seq_q val")


# --8<-- [end:attend]


# --8<-- [start:attention]
@checked
@fast.stand_in(fast.attention, where=fast.fused_kernel_computes)
def attention(
    queries: Float[Tensor, "*batch seq_q key"],
    keys: Float[Tensor, "*#batch seq key"],
    values: Float[Tensor, "*#batch seq val"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    *,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> Float[Tensor, "*batch seq_q val"]:
    r"""$\text{Attention}(Q, K, V, M, B)$, the Transformer's scaled dot-product
    attention.

    ``score_bias`` is the additive bias $B$ (a float ``attn_mask`` of
    ``scaled_dot_product_attention``). A query row with no allowed key returns zeros
    (and zero gradient), never NaN.

    Long sequences go to
    :func:`~named_transformer.core.blockwise.blockwise_attention`: the same function,
    without the $\mathsf{seq'} \times \mathsf{seq}$ weights in memory, by the rule
    the modules' automatic core asks too
    (:data:`~named_transformer.core.blockwise.AUTOMATIC_RULE`).
    ``attend(attention_weights(...), values)`` always materialises. A call that
    PyTorch's fused kernel computes the same runs it instead
    (:func:`~named_transformer.core.fast.fused_kernel_computes`; tests/test_fast.py).
    """
    block = AUTOMATIC_RULE.block(queries, keys, mask)  # None: materialise
    if block is not None:  # the same function, a block of scores at a time
        return blockwise_attention(
            queries, keys, values, mask, block, score_bias=score_bias
        )
    weights = attention_weights(queries, keys, mask, score_bias=score_bias)
    return attend(weights, values)


# --8<-- [end:attention]


# --8<-- [start:fused_attention]
@checked
def fused_attention(
    queries: Float[Tensor, "*batch seq_q key"],
    keys: Float[Tensor, "*#kv_batch seq key"],
    values: Float[Tensor, "*#kv_batch seq val"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    dropout: float = 0.0,
    training: bool = False,
    *,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> Float[Tensor, "*batch seq_q val"]:
    r"""$\text{Attention}(Q, K, V, M, B)$ by PyTorch's fused kernel, an explicit option.

    The same function as :func:`attention` (tests check it, fully masked rows included),
    computed by ``scaled_dot_product_attention``, which never materialises the
    $\mathsf{seq'} \times \mathsf{seq}$ weights: faster, and far less memory for long
    sequences. It returns no weights, and its dropout draws differ from the named
    path's. The kernel takes one ``attn_mask``: a bias $B$ goes in as a float mask,
    with $-\infty$ where $M$ blocks. Keys and values with fewer heads (third axis
    from the end) than the queries are grouped-query attention, query head $h$
    reading key/value head $\lfloor h / |\mathsf{group}| \rfloor$: the kernel's
    ``enable_gqa`` (:mod:`~named_transformer.models.grouped`).
    """
    grouped = keys.ndim > 2 and keys.shape[-3] != queries.shape[-3]
    if grouped:  # kv_heads must divide heads: a ValueError naming both otherwise
        check_groups(queries.shape[-3], keys.shape[-3])
    if score_bias is not None:
        mask = score_bias if mask is None else score_bias.masked_fill(~mask, -torch.inf)
    # with fewer axes than the queries, the kernel falls back to materialising the
    # weights
    while mask is not None and mask.ndim < queries.ndim:
        mask = rearrange(mask, "... -> 1 ...")
    return F.scaled_dot_product_attention(  # allow-raw: the fused kernel is the point
        queries, keys, values, attn_mask=mask,
        dropout_p=dropout if training else 0.0, enable_gqa=grouped,
    )  # fmt: skip


# --8<-- [end:fused_attention]


# --8<-- [start:attention_from_scores]
@checked
def attention_from_scores(
    scores: Float[Tensor, "*batch seq_q seq"],
    values: Float[Tensor, "*#batch seq val"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> Float[Tensor, "*batch seq_q val"]:
    r"""$\left(\nfun{seq}{softmax}(S + M)\right) \ndot{seq} V$ for scores $S$ from any
    function of the zoo."""
    return attend(softmax(scores, mask), values)


# --8<-- [end:attention_from_scores]
