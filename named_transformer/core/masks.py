r"""Masks: which key positions each query may attend to.

A mask is boolean, **True where attention is allowed** (the convention of
`torch.nn.functional.scaled_dot_product_attention`); the attention functions turn it
into the additive $M \in \{0, -\infty\}^{\mathsf{seq'} \times \mathsf{seq}}$ of the
equations. `torch.nn.MultiheadAttention` uses the opposite meaning for boolean masks.
Masks are created on the device you pass (the device of your inputs).
"""

from __future__ import annotations

import torch
from einops import rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor

from named_transformer.axes import checked

__all__ = [
    "additive_mask",
    "causal_mask",
    "key_padding_mask",
    "padding_mask",
    "sliding_window_mask",
]


# --8<-- [start:causal_mask]
@checked
def causal_mask(
    seq_q: int,
    seq: int | None = None,
    *,
    offset: int = 0,
    device: torch.device | str | None = None,
) -> Bool[Tensor, "seq_q seq"]:
    r"""Query position $j$ may attend key position $i$ iff $i \le j$ (paper, A.1).

    ``offset`` is the absolute position of the first query: with a key/value cache of
    length $c$ the new queries sit at positions $c, c+1, \dots$, so pass ``offset=c``.
    With ``offset=0`` and $|\mathsf{seq'}| = |\mathsf{seq}|$ this is the lower triangle,
    the same as `scaled_dot_product_attention(..., is_causal=True)`.
    """
    seq = seq_q if seq is None else seq
    query_positions = torch.arange(offset, offset + seq_q, device=device)
    key_positions = torch.arange(seq, device=device)
    return rearrange(key_positions, "seq -> 1 seq") <= rearrange(
        query_positions, "seq_q -> seq_q 1"
    )


# --8<-- [end:causal_mask]


# --8<-- [start:sliding_window_mask]
@checked
def sliding_window_mask(
    seq_q: int,
    seq: int | None = None,
    *,
    window: int,
    offset: int = 0,
    device: torch.device | str | None = None,
) -> Bool[Tensor, "seq_q seq"]:
    r"""Local causal attention: query position $j$ may attend key position $i$ iff
    $j - w < i \le j$, with $w$ = ``window``.

    Each query sees itself and the $w - 1$ positions before it: $w$ keys at most, so a
    layer's cost and its key/value cache no longer grow with the sequence (Longformer's
    local attention, made causal; Mistral 7B). The window counts the query itself, as
    Hugging Face's ``sliding_window`` does (Mistral's paper words it as "between
    $j - w$ and $j$"). Stacked layers still carry information further: $L$ layers reach
    back $L(w - 1)$ positions. ``offset`` is the absolute position of the first query,
    as in :func:`causal_mask`; a window at least as long as the sequence is the causal
    mask.
    """
    if window < 1:
        raise ValueError(f"window must be at least 1 (the query itself), got {window}")
    seq = seq_q if seq is None else seq
    query_positions = torch.arange(offset, offset + seq_q, device=device)
    key_positions = torch.arange(seq, device=device)
    distance = rearrange(query_positions, "seq_q -> seq_q 1") - rearrange(
        key_positions, "seq -> 1 seq"
    )  # j - i
    return (distance >= 0) & (distance < window)


# --8<-- [end:sliding_window_mask]


# --8<-- [start:padding_mask]
@checked
def padding_mask(
    lengths: Int[Tensor, "*batch"], seq: int
) -> Bool[Tensor, "*batch seq"]:
    r"""True at the first ``lengths[b]`` positions of each sequence, False on padding.

    To mask the keys of attention, use :func:`key_padding_mask`, which adds the
    size-1 ``seq_q`` axis.
    """
    positions = torch.arange(seq, device=lengths.device)
    return positions < rearrange(lengths, "... -> ... 1")


# --8<-- [end:padding_mask]


# --8<-- [start:key_padding_mask]
@checked
def key_padding_mask(
    lengths: Int[Tensor, "*batch"], seq: int
) -> Bool[Tensor, "*batch 1 seq"]:
    r""":func:`padding_mask` with a size-1 $\mathsf{seq'}$ axis: every query ignores
    padded keys."""
    return rearrange(padding_mask(lengths, seq), "... seq -> ... 1 seq")


# --8<-- [end:key_padding_mask]


# --8<-- [start:additive_mask]
@checked
def additive_mask(
    mask: Bool[Tensor, "*batch seq"], dtype: torch.dtype | None = None
) -> Float[Tensor, "*batch seq"]:
    r"""The equations' $M \in \{0, -\infty\}$ from a boolean mask (True where
    attention is allowed), in ``dtype`` (default: torch's default dtype).

    Added to the scores, $M$ blocks what the mask blocks: $s + (-\infty) = -\infty$
    for every score but $+\infty$ and NaN, which stay as poisonous as in
    ``scaled_dot_product_attention`` (it adds the mask too). On the CPU adding it is
    one vectorised pass, several times faster than ``masked_fill`` over the scores.
    """
    dtype = torch.get_default_dtype() if dtype is None else dtype
    blocked = torch.full((), -torch.inf, dtype=dtype, device=mask.device)
    return torch.where(mask, 0.0, blocked)


# --8<-- [end:additive_mask]
