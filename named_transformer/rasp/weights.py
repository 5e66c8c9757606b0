r"""Heads and units into the library's modules: the named weights, set by hand.

The heads of one step become one
:class:`~named_transformer.models.multihead.MultiHeadAttention`, with
$W^Q, W^K \in \mathbb R^{\mathsf{heads} \times \mathsf{layer} \times \mathsf{key}}$,
$W^V \in \mathbb R^{\mathsf{heads} \times \mathsf{layer} \times \mathsf{val}}$,
$W^O \in \mathbb R^{\mathsf{heads} \times \mathsf{val} \times \mathsf{layer}}$ (a head
narrower than the widest is padded with zeros); the units of one step one
:class:`~named_transformer.models.sublayers.FeedForward`, one row of
$W^1 \in \mathbb R^{\mathsf{hidden} \times \mathsf{layer}}$ per unit.
"""

from __future__ import annotations

import math

import torch

from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.sublayers import FeedForward
from named_transformer.rasp.operations import Head, Unit

__all__ = ["attention_block", "mlp_block"]


def _width(entries: dict, position: int) -> int:
    return max((index[position] for index in entries), default=-1) + 1


# --8<-- [start:attention_block]
def attention_block(
    heads: list[Head], layer: int, coldness: float, dtype: torch.dtype
) -> MultiHeadAttention:
    """One ``MultiHeadAttention``, one head per entry of ``heads``; $W^Q$ and $b^Q$
    carry $\\beta\\sqrt{|\\mathsf{key}|}$ (``coldness``), undoing the library's
    $1/\\sqrt{|\\mathsf{key}|}$."""
    key = max(max(_width(h.key, 1), 1) for h in heads)
    val = max(max(_width(h.value, 1), 1) for h in heads)
    block = MultiHeadAttention(layer, len(heads), key=key, val=val, bias=True)
    block = block.to(dtype)  # before the weights are written: no float32 rounding
    scale = coldness * math.sqrt(key)
    with torch.no_grad():
        for weight in block.parameters():
            weight.zero_()
        for h, head in enumerate(heads):
            for (d, k), w in head.query.items():
                block.w_q[h, d, k] = scale * w
            for k, w in head.query_bias.items():
                block.b_q[h, k] = scale * w
            for (d, k), w in head.key.items():
                block.w_k[h, d, k] = w
            for (d, v), w in head.value.items():
                block.w_v[h, d, v] = w
            for (v, d), w in head.output.items():
                block.w_o[h, v, d] = w
    return block.requires_grad_(False)


# --8<-- [end:attention_block]


# --8<-- [start:mlp_block]
def mlp_block(groups: list[list[Unit]], layer: int, dtype: torch.dtype) -> FeedForward:
    """One ``FeedForward`` (ReLU) with every unit of ``groups`` side by side."""
    units = [unit for group in groups for unit in group]
    block = FeedForward(layer, len(units), activation="relu", bias=True).to(dtype)
    with torch.no_grad():
        for weight in block.parameters():
            weight.zero_()
        for u, unit in enumerate(units):
            for d, w in unit.inputs.items():
                block.w1[u, d] = w
            block.b1[u] = unit.bias
            for d, w in unit.outputs.items():
                block.w2[d, u] = w
    return block.requires_grad_(False)


# --8<-- [end:mlp_block]
