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

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core.rotary import rotary_angles, rotate
from named_transformer.models.legacy import keeps_signature
from named_transformer.models.multihead import MultiHeadAttention, run_legacy
from named_transformer.models.variants import Positions, register_positions

__all__ = [
    "Rotary",
    "RotaryMultiHeadAttention",
    "rotary_multihead_attention",
    "rotate_heads",
]


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


# --8<-- [start:Rotary]
@dataclass(frozen=True)
class Rotary(Positions):
    r"""Rotary positions as a part of the pipeline: $R_p$ turns the queries and keys
    by their positions; nothing is added to the scores or values."""

    base: float = 10000.0
    name = "rotary"

    def rotate(self, heads: Tensor, offset: int | Tensor) -> Tensor:
        return rotate_heads(heads, offset=offset, base=self.base)


# --8<-- [end:Rotary]


# --8<-- [start:RotaryMultiHeadAttention]
class RotaryMultiHeadAttention(MultiHeadAttention):
    r""":class:`MultiHeadAttention` whose queries and keys are rotated by their
    positions (no new parameters).

    ``base`` is RoPE's base $\theta$ (10000, as RoFormer and Llama 1–2; Llama 3 uses
    500000); the other arguments are those of :class:`MultiHeadAttention`.
    $|\mathsf{key}|$ must be even.
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

    def position_scheme(self) -> Rotary:
        return Rotary(self.base)


register_positions(
    "rotary",
    lambda request: RotaryMultiHeadAttention(
        request.layer, request.heads, base=request.rotary_base, **request.options
    ),
)
# --8<-- [end:RotaryMultiHeadAttention]

rotary_multihead_attention = keeps_signature(
    "rotary_multihead_attention",
    "inputs, memory, w_q, w_k, w_v, w_o, mask=None, b_q=None, b_k=None, b_v=None, "
    "b_o=None, offset=0, base=10000.0, dropout=0.0, training=False, fused=False, *, "
    "score_bias=None",
    lambda arguments: run_legacy(arguments, Rotary(arguments["base"])),
)
