r"""Multi-head attention with rotary positions (RoPE; Su et al. 2021).

The projections of :class:`~named_transformer.models.multihead.MultiHeadAttention`,
then every head's queries and keys rotated by their positions
(:func:`~named_transformer.core.rotary.rotate`), then the same attention:

$$Q' = R_{\text{offset}}(W^Q \ndot{layer} X_{\mathsf{seq}\to\mathsf{seq'}}), \qquad
  K' = R_0(W^K \ndot{layer} X_m),$$

$$Y = W^O \ndot{heads, val} \text{Attention}(Q', K', W^V \ndot{layer} X_m, M, B),$$

where $R_p$ rotates the position $p$, $p + 1$, … of its argument. The rotation is
lifted over $\mathsf{heads}$: all heads share the angles. The values are not rotated,
and nothing is added to the embeddings (the model kinds use
:class:`~named_transformer.workflows.kinds.NoPositions`). The queries start at
``offset`` and the keys at 0: with a cache of $c$ earlier positions the new queries
pass ``offset`` $= c$, and the cache keeps keys *already rotated* at their own
positions, so no key is ever rotated twice.

Since rotation happens before the attention, the fused kernel still applies
(``fused=True``): rotate, then ``scaled_dot_product_attention``.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core.rotary import rotary_angles, rotate
from named_transformer.models.multihead import (
    MultiHeadAttention,
    attend_grouped_heads,
    attend_heads,
    project_heads,
)

__all__ = ["RotaryMultiHeadAttention", "rotary_multihead_attention", "rotate_heads"]


# --8<-- [start:rotate_heads]
@checked
def rotate_heads(
    inputs: Float[Tensor, "*batch heads seq key"],
    *,
    offset: int | Int[Tensor, " 1"] = 0,
    base: float = 10000.0,
) -> Float[Tensor, "*batch heads seq key"]:
    r"""$R_{\text{offset}}$: rotate the queries (or keys) of every head, the first at
    position ``offset``.

    The angles are computed in float32 at least (float64 for a float64 model), then
    the result returns to the dtype of ``inputs``.
    """
    angles = rotary_angles(
        inputs.shape[-2], inputs.shape[-1], offset=offset, base=base,
        dtype=torch.promote_types(inputs.dtype, torch.float32), device=inputs.device,
    )  # fmt: skip
    return rotate(inputs, angles)


# --8<-- [end:rotate_heads]


# --8<-- [start:rotary_multihead_attention]
@checked
def rotary_multihead_attention(
    inputs: Float[Tensor, "*batch seq_q layer"],
    memory: Float[Tensor, "*batch seq memory"],
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "kv_heads memory key"],
    w_v: Float[Tensor, "kv_heads memory val"],
    w_o: Float[Tensor, "heads val layer"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    b_q: Float[Tensor, "heads key"] | None = None,
    b_k: Float[Tensor, "kv_heads key"] | None = None,
    b_v: Float[Tensor, "kv_heads val"] | None = None,
    b_o: Float[Tensor, " layer"] | None = None,
    offset: int = 0,
    base: float = 10000.0,
    dropout: float = 0.0,
    training: bool = False,
    fused: bool = False,
    *,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"] | None
]:
    r"""Multi-head attention with the queries rotated from position ``offset`` and
    the keys from 0.

    Fewer key/value heads than query heads ($|\mathsf{kv\_heads}| <
    |\mathsf{heads}|$) is grouped-query attention: the rotation does not care.
    Returns (output, weights); the weights are None with ``fused=True``.
    """
    queries = rotate_heads(project_heads(inputs, w_q, b_q), offset=offset, base=base)
    keys = rotate_heads(project_heads(memory, w_k, b_k), base=base)
    values = project_heads(memory, w_v, b_v)
    grouped = keys.shape[-3] != queries.shape[-3]
    return (attend_grouped_heads if grouped else attend_heads)(
        queries, keys, values, w_o, b_o, mask, dropout, training, fused,
        score_bias=score_bias,
    )  # fmt: skip


# --8<-- [end:rotary_multihead_attention]


# --8<-- [start:RotaryMultiHeadAttention]
class RotaryMultiHeadAttention(MultiHeadAttention):
    r""":class:`MultiHeadAttention` whose queries and keys are rotated by their
    positions (no new parameters).

    ``base`` is RoPE's base (10000, as RoFormer and Llama 1–2); the other arguments
    are those of :class:`MultiHeadAttention`. $|\mathsf{key}|$ must be even.
    """

    def __init__(
        self, layer: int, heads: int, *, base: float = 10000.0, **options
    ) -> None:
        super().__init__(layer, heads, **options)
        if self.key % 2 != 0:
            raise ValueError(
                f"rotary positions rotate pairs of key channels: |key| = {self.key} "
                "is odd; choose layer, heads (or key=...) so that |key| is even"
            )
        if base <= 1.0:
            raise ValueError(f"base must be greater than 1, got {base}")
        self.base = base

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
        outputs, weights = rotary_multihead_attention(
            inputs, inputs if memory is None else memory,
            self.w_q, self.w_k, self.w_v, self.w_o, mask,
            self.b_q, self.b_k, self.b_v, self.b_o,
            offset, self.base, self.dropout, self.training, fused,
            score_bias=score_bias,
        )  # fmt: skip
        return (outputs, weights) if need_weights else outputs


# --8<-- [end:RotaryMultiHeadAttention]
