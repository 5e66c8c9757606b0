r"""Multi-head attention with linear biases (ALiBi; Press, Smith & Lewis 2022).

The attention of :class:`~named_transformer.models.multihead.MultiHeadAttention`, with
each head's scores penalised by the distance between query and key
(:func:`~named_transformer.core.alibi.alibi_bias`):

$$Y = W^O \ndot{heads, val} \text{Attention}(Q, K, V, M, B_{\text{ALiBi}} + B),
  \qquad (B_{\text{ALiBi}})_{h,j,i} = -m_h\,(j - i)$$

for the query at position $j$ and the key at position $i$.

Unlike the mask and the optional bias $B$ of multi-head attention, which all heads
share, $B_{\text{ALiBi}}$ carries a $\mathsf{heads}$ axis: one slope per head. It is
lifted over the batch only. The slopes are fixed (a buffer, not a parameter, and not
stored in checkpoints: they follow from the number of heads), and nothing is added to
the embeddings. The queries start at ``offset`` and the keys at 0, so a cached
decoding step passes the cache length as ``offset``.

In the pipeline ALiBi is one part, :class:`LinearBiases`: a per-head score term
$T$, which the attention owns (``MultiHeadAttention(layer, heads,
positions=ALiBi())``). Every
core takes it (the fused kernel as a float ``attn_mask``, the blockwise one block by
block), and with grouped key/value heads the slopes are split with the query heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from jaxtyping import TypeCheckError
from torch import Tensor, nn

from named_transformer.core.alibi import alibi_bias, alibi_slopes
from named_transformer.models.variants import (
    Positions,
    PositionScheme,
    register_scheme,
)

__all__ = ["ALiBi", "LinearBiases"]


# --8<-- [start:ALiBi]
class LinearBiases(Positions, nn.Module):
    r"""ALiBi's part of one attention: the score term
    $T = B_{\text{ALiBi}} \in \mathbb R^{\mathsf{heads} \times \mathsf{seq'} \times
    \mathsf{seq}}$ for queries from position ``offset``, from fixed per-head slopes
    $m_h$ (a buffer, not a parameter, and not stored in checkpoints: they follow from
    the number of heads)."""

    name = "ALiBi"

    def __init__(self, heads: int, symmetric: bool = False) -> None:
        super().__init__()
        self.symmetric = symmetric
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)

    def score_term(self, queries: Tensor, seq: int, offset: int | Tensor) -> Tensor:
        if self.slopes.shape[-1] != queries.shape[-3]:
            raise TypeCheckError(
                f"parameter 'slopes' has {self.slopes.shape[-1]} slopes (axis "
                f"'heads') but the queries have {queries.shape[-3]} heads"
            )
        return alibi_bias(
            queries.shape[-2], seq, self.slopes, offset=offset,
            symmetric=self.symmetric,
        )  # fmt: skip


@register_scheme
@dataclass(frozen=True)
class ALiBi(PositionScheme):
    r"""ALiBi: every self-attention's scores penalised by the distance, one slope per
    head (:class:`LinearBiases`); nothing is added to the embeddings.

    ``symmetric=False`` is the paper's causal form $-m_h(j - i)$ for the query at
    $j$ and the key at $i$, for a decoder under a causal mask; ``symmetric=True``
    gives $-m_h|j - i|$, for an encoder that attends both ways. None (a model's
    configuration): by the stack, symmetric in an encoder and causal in a decoder.
    """

    symmetric: bool | None = None
    kind: ClassVar[str] = "alibi"

    def part(self, attention: Any) -> LinearBiases:
        return LinearBiases(attention.heads, symmetric=bool(self.symmetric))

    def within(self, causal: bool) -> ALiBi:
        return self if self.symmetric is not None else ALiBi(symmetric=not causal)


# --8<-- [end:ALiBi]
