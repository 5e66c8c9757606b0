r"""Multi-head attention with linear biases (ALiBi; Press, Smith & Lewis 2022).

The attention of :class:`~named_transformer.models.multihead.MultiHeadAttention`, with
each head's scores penalised by the distance between query and key
(:func:`~named_transformer.core.alibi.alibi_bias`):

$$Y = W^O \ndot{heads, val} \text{Attention}(Q, K, V, M, B_{\text{ALiBi}} + B),
  \qquad (B_{\text{ALiBi}})_{h,i,j} = -m_h\,(i - j).$$

Unlike the mask and the optional bias $B$ of multi-head attention, which all heads
share, $B_{\text{ALiBi}}$ carries a $\mathsf{heads}$ axis: one slope per head. It is
lifted over the batch only. The slopes are fixed (a buffer, not a parameter, and not
stored in checkpoints: they follow from the number of heads), and nothing is added to
the embeddings. The queries start at ``offset`` and the keys at 0, so a cached
decoding step passes the cache length as ``offset``.

The bias is a float ``attn_mask`` for the fused kernel, so ``fused=True`` works.
"""

from __future__ import annotations

from einops import rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core.alibi import alibi_bias, alibi_slopes
from named_transformer.core.attention import attend, attention_weights, fused_attention
from named_transformer.core.dropout import dropout as drop
from named_transformer.models.multihead import (
    MultiHeadAttention,
    merge_heads,
    project_heads,
)

__all__ = [
    "ALiBiMultiHeadAttention",
    "alibi_attend_heads",
    "alibi_multihead_attention",
]


def _split(tensor: Tensor, kv_heads: int) -> Tensor:
    """``heads -> (kv_heads group)`` on the third axis from the end."""
    pattern = "... (kv_heads group) seq_q x -> ... kv_heads group seq_q x"
    return rearrange(tensor, pattern, kv_heads=kv_heads)


def _shared(tensor: Tensor) -> Tensor:
    """A size-1 ``group`` axis before the last two: shared by the group."""
    return rearrange(tensor, "... seq x -> ... 1 seq x")


def _merge(tensor: Tensor) -> Tensor:
    """``(kv_heads group) -> heads``."""
    pattern = "... kv_heads group seq_q x -> ... (kv_heads group) seq_q x"
    return rearrange(tensor, pattern)


# --8<-- [start:alibi_attend_heads]
@checked
def alibi_attend_heads(
    queries: Float[Tensor, "*batch heads seq_q key"],
    keys: Float[Tensor, "*#batch kv_heads seq key"],
    values: Float[Tensor, "*#batch kv_heads seq val"],
    w_o: Float[Tensor, "heads val layer"],
    slopes: Float[Tensor, " heads"],
    b_o: Float[Tensor, " layer"] | None = None,
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    offset: int | Int[Tensor, " 1"] = 0,
    dropout: float = 0.0,
    training: bool = False,
    fused: bool = False,
    *,
    symmetric: bool = False,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"] | None
]:
    r"""$W^O \ndot{heads, val} \text{Attention}(Q, K, V, M, B_{\text{ALiBi}} + B)$
    from already projected heads, the first query at position ``offset``.

    The mask $M$ and the bias $B$ (``score_bias``) are shared by all heads and lifted
    over $\mathsf{heads}$; $B_{\text{ALiBi}}$ has a $\mathsf{heads}$ axis of its own
    and broadcasts over the batch. With fewer key/value heads than query heads
    (grouped-query attention) the query heads and their slopes are split
    $\mathsf{heads} \to (\mathsf{kv\_heads}, \mathsf{group})$ and the keys and
    values are shared by each group. Returns (output, weights), the weights None with
    ``fused=True``.
    """
    bias = alibi_bias(
        queries.shape[-2], keys.shape[-2], slopes, offset=offset, symmetric=symmetric
    )  # heads seq_q seq
    if score_bias is not None:
        bias = bias + rearrange(score_bias, "... seq_q seq -> ... 1 seq_q seq")
    if mask is not None:
        mask = rearrange(mask, "... seq_q seq -> ... 1 seq_q seq")  # lift over heads
    kv_heads = keys.shape[-3]
    grouped = kv_heads != queries.shape[-3]
    if grouped:  # a size-1 group axis on K, V and M: lifted over the group
        queries, bias = (_split(tensor, kv_heads) for tensor in (queries, bias))
        keys, values = (_shared(tensor) for tensor in (keys, values))
        mask = None if mask is None else _shared(mask)
    if fused:
        outputs = fused_attention(
            queries, keys, values, mask, dropout, training, score_bias=bias
        )
        outputs = _merge(outputs) if grouped else outputs
        return merge_heads(outputs, w_o, b_o), None
    weights = attention_weights(queries, keys, mask, score_bias=bias)
    outputs = attend(drop(weights, dropout, training), values)
    if grouped:
        weights, outputs = _merge(weights), _merge(outputs)
    return merge_heads(outputs, w_o, b_o), weights


# --8<-- [end:alibi_attend_heads]


# --8<-- [start:alibi_multihead_attention]
@checked
def alibi_multihead_attention(
    inputs: Float[Tensor, "*batch seq_q layer"],
    memory: Float[Tensor, "*batch seq memory"],
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "kv_heads memory key"],
    w_v: Float[Tensor, "kv_heads memory val"],
    w_o: Float[Tensor, "heads val layer"],
    slopes: Float[Tensor, " heads"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    b_q: Float[Tensor, "heads key"] | None = None,
    b_k: Float[Tensor, "kv_heads key"] | None = None,
    b_v: Float[Tensor, "kv_heads val"] | None = None,
    b_o: Float[Tensor, " layer"] | None = None,
    offset: int = 0,
    dropout: float = 0.0,
    training: bool = False,
    fused: bool = False,
    *,
    symmetric: bool = False,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"] | None
]:
    r"""Multi-head attention of ``inputs`` over ``memory`` with linear biases of
    slopes ``slopes``; the first query at position ``offset``, the first key at 0."""
    queries = project_heads(inputs, w_q, b_q)
    keys = project_heads(memory, w_k, b_k)
    values = project_heads(memory, w_v, b_v)
    return alibi_attend_heads(
        queries, keys, values, w_o, slopes, b_o, mask, offset, dropout, training,
        fused, symmetric=symmetric, score_bias=score_bias,
    )  # fmt: skip


# --8<-- [end:alibi_multihead_attention]


# --8<-- [start:ALiBiMultiHeadAttention]
class ALiBiMultiHeadAttention(MultiHeadAttention):
    r""":class:`MultiHeadAttention` with ALiBi's fixed per-head slopes $m_h$ (no new
    parameters).

    ``symmetric=False`` is the paper's causal form $-m_h(i - j)$, for a decoder under
    a causal mask; ``symmetric=True`` gives $-m_h|i - j|$, for an encoder that attends
    both ways. The other arguments are those of :class:`MultiHeadAttention`.
    """

    def __init__(
        self, layer: int, heads: int, *, symmetric: bool = False, **options
    ) -> None:
        super().__init__(layer, heads, **options)
        self.symmetric = symmetric
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq_q layer"],
        memory: Float[Tensor, "*batch seq memory"] | None = None,
        mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
        need_weights: bool = False,
        offset: int = 0,
        *,
        score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    ) -> (
        Float[Tensor, "*batch seq_q layer"]
        | tuple[
            Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"]
        ]
    ):
        """As :meth:`MultiHeadAttention.forward`; ``offset`` is the first query's
        position (the keys of ``memory``, default the inputs, start at 0)."""
        fused = self.fused and not need_weights  # the fused kernel returns no weights
        outputs, weights = alibi_multihead_attention(
            inputs, inputs if memory is None else memory,
            self.w_q, self.w_k, self.w_v, self.w_o, self.slopes, mask,
            self.b_q, self.b_k, self.b_v, self.b_o,
            offset, self.dropout, self.training, fused,
            symmetric=self.symmetric, score_bias=score_bias,
        )  # fmt: skip
        return (outputs, weights) if need_weights else outputs


# --8<-- [end:ALiBiMultiHeadAttention]
