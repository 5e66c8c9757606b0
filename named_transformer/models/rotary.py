r"""Multi-head attention with rotary positions (RoPE; Su et al. 2021).

The projections of :class:`~named_transformer.models.multihead.MultiHeadAttention`,
then every head's queries and keys rotated by their positions
(:func:`~named_transformer.core.rotary.rotate`), then the same attention:

$$Q' = R_{\text{offset}}(W^Q \ndot{layer} X_{\mathsf{seq}\to\mathsf{seq'}}), \qquad
  K' = R_0(W^K \ndot{layer} X_m),$$

$$Y = W^O \ndot{heads, val} \text{Attention}(Q', K', W^V \ndot{layer} X_m, M, B),$$

where $R_p$ rotates the position $p$, $p + 1$, … of its argument. The rotation is
lifted over $\mathsf{heads}$: all heads share the angles. The values are not rotated,
and nothing is added to the embeddings. The attention owns the scheme:
``MultiHeadAttention(layer, heads, positions=Rotary(base))``, and a model's
configuration names it once for every self-attention
(``TransformerConfig(positions=Rotary())``). The queries start at
``offset`` and the keys at 0: with a cache of $c$ earlier positions the new queries
pass ``offset`` $= c$, and the cache keeps keys *already rotated* at their own
positions, so no key is ever rotated twice.

Since rotation happens before the attention, the fused kernel still applies
(``fused=True``): rotate, then ``scaled_dot_product_attention``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from jaxtyping import Float, Int
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core.rotary import rotary_angles, rotate
from named_transformer.models.variants import (
    Positions,
    PositionScheme,
    register_scheme,
)

__all__ = ["Rotary", "rotate_heads"]


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
@register_scheme
@dataclass(frozen=True)
class Rotary(PositionScheme, Positions):
    r"""Rotary positions: $R_p$ turns every self-attention's queries and keys by
    their positions; nothing is added to the embeddings, scores or values.

    ``base`` is RoPE's base $\theta$ (10000, as RoFormer and Llama 1–2; Llama 3 uses
    500000). The scheme is its own part (it has no parameters); the attention's
    $|\mathsf{key}|$ must be even.
    """

    base: float = 10000.0
    kind: ClassVar[str] = "rotary"
    name: ClassVar[str] = "rotary"

    def __post_init__(self) -> None:
        if self.base <= 1.0:
            raise ValueError(f"rotary base must be greater than 1, got {self.base}")

    def part(self, attention: Any) -> Rotary:
        if attention.key % 2 != 0:
            raise ValueError(
                "rotary positions rotate pairs of key channels: |key| = "
                f"{attention.key} is odd; choose layer, heads (or key=...) so that "
                "|key| is even"
            )
        return self

    def rotate(self, heads: Tensor, offset: int | Tensor) -> Tensor:
        return rotate_heads(heads, offset=offset, base=self.base)


# --8<-- [end:Rotary]
