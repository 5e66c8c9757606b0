r"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018; Chai).

Instead of adding absolute positions to the inputs, each attention layer learns one
vector per *clipped distance* between a query at position $j$ and a key at position
$i$, for the keys and for the values, shared by all heads:
$a^K \in \mathbb R^{\mathsf{distance} \times \mathsf{key}}$,
$a^V \in \mathbb R^{\mathsf{distance} \times \mathsf{val}}$,
$|\mathsf{distance}| = 2k+1$.

$$e_{ji} = \frac{q_j \ndot{key}
  (k_i + a^K_{\operatorname{clip}(i-j,\,k)})}{\sqrt{|\mathsf{key}|}},
  \qquad \alpha = \nfun{seq}{softmax}\, e, \qquad
  z_j = \sum_i \alpha_{ji} \left(v_i + a^V_{\operatorname{clip}(i-j,\,k)}\right).$$

(Shaw et al. write the query as $i$ and the key as $j$; this library writes the
query $j$ and the key $i$ on every page, as its masks do.)

Distances beyond $k$ are clipped, so the model generalises to lengths unseen in
training. The tables add $(2k+1)(|\mathsf{key}| + |\mathsf{val}|)$ parameters to
multi-head attention ($2(2k+1)|\mathsf{key}|$ when $|\mathsf{val}| = |\mathsf{key}|$).
Looking the table up by the index matrix of
:func:`named_transformer.core.positions.relative_position_index` gives
$R^K \in \mathbb R^{\mathsf{seq'} \times \mathsf{seq} \times \mathsf{key}}$ (one copy,
not one per example or head); the relative terms are then plain contractions,
$Q \ndot{key} R^K$ and $\alpha \ndot{seq} R^V$. Query and key lengths may differ: with
a cache of $c$ earlier positions, the queries start at ``offset`` $= c$.

In the multi-head pipeline these are the score term and the value term of one part,
:class:`RelativeTables`, owned by the attention (``MultiHeadAttention(layer,
heads, positions=Relative(k))``); since the value term reads the weights $\alpha$,
relative
positions run on the materialising core only (fused and blockwise are refused in one
line). Grouped key/value heads work: the terms follow the query heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.core.attention import attend
from named_transformer.core.positions import relative_position_index
from named_transformer.core.scores import scaled_dot_score
from named_transformer.core.softmax import softmax
from named_transformer.models.variants import (
    Positions,
    PositionScheme,
    register_scheme,
)

__all__ = [
    "Relative",
    "RelativeTables",
    "relative_attend",
    "relative_attention_weights",
]


# --8<-- [start:relative_terms]
def _key_term(queries: Tensor, a_k: Tensor, index: Tensor) -> Tensor:
    r"""$(Q \ndot{key} R^K)/\sqrt{|\mathsf{key}|}$, $R^K = a^K_{\text{index}}$: one
    row of $a^K$ per (query, key) pair."""
    relative_keys = a_k[index]  # seq_q seq key
    relative = einsum(
        queries, relative_keys, "... seq_q key, seq_q seq key -> ... seq_q seq"
    )
    return relative / math.sqrt(queries.shape[-1])


def _value_term(weights: Tensor, a_v: Tensor, index: Tensor) -> Tensor:
    r"""$\alpha \ndot{seq} R^V$, $R^V = a^V_{\text{index}}$."""
    return einsum(weights, a_v[index], "... seq_q seq, seq_q seq val -> ... seq_q val")


# --8<-- [end:relative_terms]


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
    scores = scaled_dot_score(queries, keys) + _key_term(queries, a_k, index)
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
    return attend(weights, values) + _value_term(weights, a_v, index)


# --8<-- [end:relative_attend]


# --8<-- [start:Relative]
class RelativeTables(Positions, nn.Module):
    r"""Relative positions' part of one attention: the tables
    $a^K \in \mathbb R^{(2k+1) \times \mathsf{key}}$,
    $a^V \in \mathbb R^{(2k+1) \times \mathsf{val}}$, giving the score term
    $T = (Q \ndot{key} R^K)/\sqrt{|\mathsf{key}|}$ and the value term
    $U(A) = A \ndot{seq} R^V$, with $R = a_{\text{index}}$ looked up by clipped
    distance. The value term needs the weights $A$: only the materialising core
    runs it."""

    name = "relative"
    uses_weights = True
    takes_tensor_offset = False  # the tables are indexed by Python numbers

    def __init__(self, max_distance: int, key: int, val: int) -> None:
        super().__init__()
        if max_distance < 0:
            raise ValueError(
                f"max_distance (clipping distance k) must be >= 0, got {max_distance}"
            )
        self.max_distance = max_distance
        distance = 2 * max_distance + 1
        self.a_k = nn.Parameter(torch.randn(distance, key) / math.sqrt(key))
        self.a_v = nn.Parameter(torch.randn(distance, val) / math.sqrt(val))

    def _index(self, seq_q: int, seq: int, offset: int | Tensor) -> Tensor:
        return relative_position_index(
            seq_q, seq, self.max_distance, offset=offset, device=self.a_k.device
        )

    def score_term(self, queries: Tensor, seq: int, offset: int | Tensor) -> Tensor:
        index = self._index(queries.shape[-2], seq, offset)
        return _key_term(queries, self.a_k, index)

    def value_term(self, weights: Tensor, offset: int | Tensor) -> Tensor:
        return _value_term(weights, self.a_v, self._index(*weights.shape[-2:], offset))


@register_scheme
@dataclass(frozen=True)
class Relative(PositionScheme):
    r"""Shaw et al.'s relative positions: every self-attention learns its own tables
    (:class:`RelativeTables`) of ``max_distance`` $= k$ distances each way; nothing
    is added to the embeddings."""

    max_distance: int = 8
    kind: ClassVar[str] = "relative"

    def __post_init__(self) -> None:
        if self.max_distance < 0:
            raise ValueError(
                "max_distance (clipping distance k) must be >= 0, "
                f"got {self.max_distance}"
            )

    def part(self, attention: Any) -> RelativeTables:
        return RelativeTables(self.max_distance, attention.key, attention.val)


# --8<-- [end:Relative]
