r"""Grouped-query attention: fewer key/value heads than query heads, by broadcasting.

Multi-query attention (Shazeer, 2019) lets every query head share one key head and one
value head; grouped-query attention (Ainslie et al., 2023) sits between it and
multi-head attention: $|\mathsf{kv\_heads}|$ key/value heads, each shared by a group of
$|\mathsf{group}| = |\mathsf{heads}| / |\mathsf{kv\_heads}|$ query heads. The keys and
values, and so the decoder's key/value cache, shrink by that factor.

In named notation nothing is repeated. The queries' $\mathsf{heads}$ axis is split in
two, $\mathsf{heads} \to (\mathsf{kv\_heads}, \mathsf{group})$; the keys and values
carry $\mathsf{kv\_heads}$ but no $\mathsf{group}$, and attention is lifted over
$\mathsf{group}$ like over any axis it does not name:

$$\text{Attention}(Q_{\mathsf{heads}\to(\mathsf{kv\_heads},\mathsf{group})}, K, V, M)
  \in \mathbb R^{\mathsf{kv\_heads} \times \mathsf{group} \times \mathsf{seq'}
  \times \mathsf{val}}$$

with $Q \in \mathbb R^{\mathsf{heads} \times \mathsf{seq'} \times \mathsf{key}}$,
$K \in \mathbb R^{\mathsf{kv\_heads} \times \mathsf{seq} \times \mathsf{key}}$ and
$V \in \mathbb R^{\mathsf{kv\_heads} \times \mathsf{seq} \times \mathsf{val}}$; the
result's $(\mathsf{kv\_heads}, \mathsf{group})$ merge back into $\mathsf{heads}$ for
$W^O$ (:func:`~named_transformer.models.multihead.attend_projected`). In the code
the keys get a size-1 $\mathsf{group}$ axis, since einops and torch broadcast by
position. Query head $h$ reads key/value head $\lfloor h / |\mathsf{group}| \rfloor$
($\mathsf{kv\_heads}$ is the outer axis of the merge): the grouping of
``repeat_interleave`` on K and V (Llama's ``repeat_kv``) and of
``scaled_dot_product_attention(..., enable_gqa=True)``, which the fused core passes
the heads to as they are (:func:`~named_transformer.core.attention.fused_attention`).
$|\mathsf{kv\_heads}| = 1$ is multi-query attention,
$|\mathsf{kv\_heads}| = |\mathsf{heads}|$ multi-head attention.
"""

from __future__ import annotations

from einops import rearrange
from jaxtyping import Bool, Float
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core.attention import attend, attention_weights, check_groups

__all__ = ["group_queries", "grouped_attention"]


def _split_groups(tensor: Tensor, kv_heads: int) -> Tensor:
    """``heads -> (kv_heads group)`` on the third axis from the end, checked; a
    size-1 axis there (shared by all heads) becomes two size-1 axes."""
    if tensor.shape[-3] == 1:
        return rearrange(tensor, "... 1 seq_q x -> ... 1 1 seq_q x")
    check_groups(tensor.shape[-3], kv_heads)
    return rearrange(
        tensor, "... (kv_heads group) seq_q x -> ... kv_heads group seq_q x",
        kv_heads=kv_heads,
    )  # fmt: skip


def _share_over_group(tensor: Tensor) -> Tensor:
    """Keys, values or a lifted mask with a size-1 ``group`` axis before the last
    two: lifted over the group."""
    return rearrange(tensor, "... seq x -> ... 1 seq x")


def _lift(mask: Tensor | None) -> Tensor | None:
    """A mask (or bias) shared by all heads: size-1 ``kv_heads`` and ``group`` axes."""
    if mask is None:
        return None
    return rearrange(mask, "... seq_q seq -> ... 1 1 seq_q seq")


def _merge_groups(tensor: Tensor) -> Tensor:
    """``(kv_heads group) -> heads``: back to one axis of query heads."""
    return rearrange(
        tensor, "... kv_heads group seq_q x -> ... (kv_heads group) seq_q x"
    )


# --8<-- [start:group_queries]
@checked
def group_queries(
    queries: Float[Tensor, "*batch heads seq_q key"], kv_heads: int
) -> Float[Tensor, "*batch kv_heads group seq_q key"]:
    r"""$Q_{\mathsf{heads}\to(\mathsf{kv\_heads},\mathsf{group})}$: the query heads,
    split into groups that share one key/value head.

    Query head $h$ lands in group $\lfloor h / |\mathsf{group}| \rfloor$. A
    ``ValueError`` names both numbers when ``kv_heads`` does not divide the heads.
    """
    check_groups(queries.shape[-3], kv_heads)
    return _split_groups(queries, kv_heads)


# --8<-- [end:group_queries]


# --8<-- [start:grouped_attention]
@checked
def grouped_attention(
    queries: Float[Tensor, "*batch heads seq_q key"],
    keys: Float[Tensor, "*#batch kv_heads seq key"],
    values: Float[Tensor, "*#batch kv_heads seq val"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    *,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> Float[Tensor, "*batch heads seq_q val"]:
    r"""$\text{Attention}(Q_{\mathsf{heads}\to(\mathsf{kv\_heads},\mathsf{group})},
    K, V, M, B)_{(\mathsf{kv\_heads},\mathsf{group})\to\mathsf{heads}}$.

    $$A = \nfun{seq}{softmax}\left(\frac{Q_{\mathsf{heads}\to(\mathsf{kv\_heads},
      \mathsf{group})} \ndot{key} K}{\sqrt{|\mathsf{key}|}} + B + M\right), \qquad
      A \ndot{seq} V$$

    $K$ and $V$ have no $\mathsf{group}$ axis: they are broadcast, never copied. The
    mask $M$ and the bias $B$ are shared by all heads. Equal to multi-head attention
    with K and V repeated $|\mathsf{group}|$ times each (``repeat_interleave`` along
    the heads) and to PyTorch's ``scaled_dot_product_attention(..., enable_gqa=True)``:
    the tests check both.
    """
    grouped = group_queries(queries, keys.shape[-3])
    weights = attention_weights(
        grouped, _share_over_group(keys), _lift(mask), score_bias=_lift(score_bias)
    )
    return _merge_groups(attend(weights, _share_over_group(values)))


# --8<-- [end:grouped_attention]
