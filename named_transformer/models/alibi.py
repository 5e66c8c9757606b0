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

In the pipeline ALiBi is one part, :class:`ALiBi`: a per-head score term $T$. Every
core takes it (the fused kernel as a float ``attn_mask``, the blockwise one block by
block), and with grouped key/value heads the slopes are split with the query heads.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxtyping import TypeCheckError
from torch import Tensor

from named_transformer.core.alibi import alibi_bias, alibi_slopes
from named_transformer.models.legacy import keeps_signature
from named_transformer.models.multihead import MultiHeadAttention, run_legacy
from named_transformer.models.variants import Positions, register_positions

__all__ = [
    "ALiBi",
    "ALiBiMultiHeadAttention",
    "alibi_attend_heads",
    "alibi_multihead_attention",
]


# --8<-- [start:ALiBi]
@dataclass(frozen=True)
class ALiBi(Positions):
    r"""ALiBi as a part of the pipeline: the score term
    $T = B_{\text{ALiBi}} \in \mathbb R^{\mathsf{heads} \times \mathsf{seq'} \times
    \mathsf{seq}}$, one slope per head, for queries from position ``offset``."""

    slopes: Tensor  # heads
    symmetric: bool = False
    name = "ALiBi"

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


# --8<-- [end:ALiBi]


# --8<-- [start:ALiBiMultiHeadAttention]
class ALiBiMultiHeadAttention(MultiHeadAttention):
    r""":class:`MultiHeadAttention` with ALiBi's fixed per-head slopes $m_h$ (no new
    parameters).

    ``symmetric=False`` is the paper's causal form $-m_h(j - i)$ for the query at
    $j$ and the key at $i$, for a decoder under a causal mask; ``symmetric=True``
    gives $-m_h|j - i|$, for an encoder that attends both ways. The other arguments
    are those of :class:`MultiHeadAttention`.
    """

    def __init__(
        self, layer: int, heads: int, *, symmetric: bool = False, **options
    ) -> None:
        super().__init__(layer, heads, **options)
        self.symmetric = symmetric
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)

    def position_scheme(self) -> ALiBi:
        return ALiBi(self.slopes, self.symmetric)


register_positions(  # an encoder's layers attend both ways: |j - i|
    "alibi",
    lambda request: ALiBiMultiHeadAttention(
        request.layer, request.heads, symmetric=not request.causal, **request.options
    ),
)
# --8<-- [end:ALiBiMultiHeadAttention]


def _run_alibi(arguments: dict) -> tuple:
    """0.4.0's ALiBi functions: their slopes and symmetry make the part."""
    return run_legacy(arguments, ALiBi(arguments["slopes"], arguments["symmetric"]))


_OPTIONS = "offset=0, dropout=0.0, training=False, fused=False, *, symmetric=False, "
alibi_multihead_attention = keeps_signature(
    "alibi_multihead_attention",
    "inputs, memory, w_q, w_k, w_v, w_o, slopes, mask=None, b_q=None, b_k=None, "
    f"b_v=None, b_o=None, {_OPTIONS}score_bias=None",
    _run_alibi,
)
alibi_attend_heads = keeps_signature(
    "alibi_attend_heads",
    "queries, keys, values, w_o, slopes, b_o=None, mask=None, "
    f"{_OPTIONS}score_bias=None",
    _run_alibi,
)
