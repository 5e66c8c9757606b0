r"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018; Chai).

Instead of adding absolute positions to the inputs, each attention layer learns one
vector per *clipped distance* between a query at position $i$ and a key at position
$j$, for the keys and for the values, shared by all heads:
$a^K \in \mathbb R^{\mathsf{distance} \times \mathsf{key}}$,
$a^V \in \mathbb R^{\mathsf{distance} \times \mathsf{val}}$,
$|\mathsf{distance}| = 2k+1$.

$$e_{ij} = \frac{q_i \ndot{key}
  (k_j + a^K_{\operatorname{clip}(j-i,\,k)})}{\sqrt{|\mathsf{key}|}},
  \qquad \alpha = \nfun{seq}{softmax}\, e, \qquad
  z_i = \sum_j \alpha_{ij} \left(v_j + a^V_{\operatorname{clip}(j-i,\,k)}\right).$$

Distances beyond $k$ are clipped, so the model generalises to lengths unseen in
training. The tables add $(2k+1)(|\mathsf{key}| + |\mathsf{val}|)$ parameters to
multi-head attention ($2(2k+1)|\mathsf{key}|$ when $|\mathsf{val}| = |\mathsf{key}|$).
Looking the table up by the index matrix of
:func:`named_transformer.core.positions.relative_position_index` gives
$R^K \in \mathbb R^{\mathsf{seq'} \times \mathsf{seq} \times \mathsf{key}}$ (one copy,
not one per example or head); the relative terms are then plain contractions,
$Q \ndot{key} R^K$ and $\alpha \ndot{seq} R^V$. Query and key lengths may differ: with
a cache of $c$ earlier positions, the queries start at ``offset`` $= c$.
"""

from __future__ import annotations

import math

import torch
from einops import einsum, rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.attention import attend
from named_transformer.core.dropout import dropout as drop
from named_transformer.core.positions import relative_position_index
from named_transformer.core.scores import scaled_dot_score
from named_transformer.core.softmax import softmax
from named_transformer.models.multihead import (
    MultiHeadAttention,
    merge_heads,
    project_heads,
)

__all__ = [
    "RelativeMultiHeadAttention",
    "relative_attend",
    "relative_attention_weights",
    "relative_multihead_attention",
]


# --8<-- [start:relative_attention_weights]
@checked
def relative_attention_weights(
    queries: Float[Tensor, "*batch seq_q key"],
    keys: Float[Tensor, "*batch seq key"],
    a_k: Float[Tensor, "distance key"],
    index: Int[Tensor, "seq_q seq"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> Float[Tensor, "*batch seq_q seq"]:
    r"""Attention weights with the relative key term $Q \ndot{key} R^K$.

    $$\nfun{seq}{softmax}\left((Q \ndot{key} K + Q \ndot{key} R^K)/\sqrt{|\mathsf{key}|}
      + M\right)$$

    $R^K = a^K_{\text{index}}$ looks up one row of $a^K$ per (query, key) pair.
    """
    relative_keys = a_k[index]  # seq_q seq key: a row lookup per (query, key) pair
    relative = einsum(
        queries, relative_keys, "... seq_q key, seq_q seq key -> ... seq_q seq"
    )
    scores = scaled_dot_score(queries, keys) + relative / math.sqrt(queries.shape[-1])
    return softmax(scores, mask)


# --8<-- [end:relative_attention_weights]


# --8<-- [start:relative_attend]
@checked
def relative_attend(
    weights: Float[Tensor, "*batch seq_q seq"],
    values: Float[Tensor, "*batch seq val"],
    a_v: Float[Tensor, "distance val"],
    index: Int[Tensor, "seq_q seq"],
) -> Float[Tensor, "*batch seq_q val"]:
    r"""$\alpha \ndot{seq} V + \alpha \ndot{seq} R^V$, $R^V = a^V_{\text{index}}$."""
    relative_values = a_v[index]  # seq_q seq val
    relative = einsum(
        weights, relative_values, "... seq_q seq, seq_q seq val -> ... seq_q val"
    )
    return attend(weights, values) + relative


# --8<-- [end:relative_attend]


# --8<-- [start:relative_multihead_attention]
@checked
def relative_multihead_attention(
    inputs: Float[Tensor, "*batch seq_q layer"],
    memory: Float[Tensor, "*batch seq memory"],
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "heads memory key"],
    w_v: Float[Tensor, "heads memory val"],
    w_o: Float[Tensor, "heads val layer"],
    a_k: Float[Tensor, "distance key"],
    a_v: Float[Tensor, "distance val"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    b_q: Float[Tensor, "heads key"] | None = None,
    b_k: Float[Tensor, "heads key"] | None = None,
    b_v: Float[Tensor, "heads val"] | None = None,
    b_o: Float[Tensor, " layer"] | None = None,
    offset: int = 0,
    dropout: float = 0.0,
    training: bool = False,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"]
]:
    r"""Multi-head attention with Shaw et al.'s relative terms;
    $k = (|\mathsf{distance}| - 1)/2$.

    The first query sits at position ``offset`` (the cache length when decoding step by
    step), the first key at 0. Returns (output, weights).
    """
    seq_q, seq = inputs.shape[-2], memory.shape[-2]
    index = relative_position_index(
        seq_q, seq, (a_k.shape[0] - 1) // 2, offset=offset, device=inputs.device
    )
    queries = project_heads(inputs, w_q, b_q)
    keys = project_heads(memory, w_k, b_k)
    values = project_heads(memory, w_v, b_v)
    if mask is not None:
        mask = rearrange(mask, "... seq_q seq -> ... 1 seq_q seq")  # lift over heads
    weights = relative_attention_weights(queries, keys, a_k, index, mask)
    dropped = drop(weights, dropout, training)
    return merge_heads(relative_attend(dropped, values, a_v, index), w_o, b_o), weights


# --8<-- [end:relative_multihead_attention]


# --8<-- [start:RelativeMultiHeadAttention]
class RelativeMultiHeadAttention(MultiHeadAttention):
    r""":class:`MultiHeadAttention` plus
    $a^K \in \mathbb R^{(2k+1) \times \mathsf{key}}$,
    $a^V \in \mathbb R^{(2k+1) \times \mathsf{val}}$.

    ``max_distance`` is the clipping distance $k$; the other arguments are those of
    :class:`MultiHeadAttention`.
    """

    def __init__(self, layer: int, heads: int, max_distance: int, **options) -> None:
        if options.get("fused"):
            raise ValueError(
                "relative attention adds a^K to the scores before the softmax, "
                "which the fused kernel cannot: fused=True is not available here"
            )
        for option in ("block", "kv_heads"):  # its own weights path has neither
            if options.get(option) is not None:
                raise ValueError(f"relative attention has no {option} option")
        super().__init__(layer, heads, **options)
        if max_distance < 0:
            raise ValueError(
                f"max_distance (clipping distance k) must be >= 0, got {max_distance}"
            )
        self.max_distance = max_distance
        distance = 2 * max_distance + 1
        self.a_k = nn.Parameter(torch.randn(distance, self.key) / math.sqrt(self.key))
        self.a_v = nn.Parameter(torch.randn(distance, self.val) / math.sqrt(self.val))

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq_q layer"],
        memory: Float[Tensor, "*batch seq memory"] | None = None,
        mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
        need_weights: bool = False,
        offset: int = 0,
    ) -> (
        Float[Tensor, "*batch seq_q layer"]
        | tuple[
            Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"]
        ]
    ):
        """As :meth:`MultiHeadAttention.forward`; ``offset`` is the first query's
        position."""
        memory = inputs if memory is None else memory
        outputs, weights = relative_multihead_attention(
            inputs, memory, self.w_q, self.w_k, self.w_v, self.w_o,
            self.a_k, self.a_v, mask,
            self.b_q, self.b_k, self.b_v, self.b_o,
            offset, self.dropout, self.training,
        )  # fmt: skip
        return (outputs, weights) if need_weights else outputs


# --8<-- [end:RelativeMultiHeadAttention]
