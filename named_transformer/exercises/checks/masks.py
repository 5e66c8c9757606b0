"""Checks of the page "Masks: causal and padding": ``causal_mask``,
``padding_mask``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from named_transformer.exercises.checks._references import _causal
from named_transformer.exercises.checks._support import (
    Check,
    _close,
    _randn,
    _rejects,
)


def causal_mask_lower_triangle(impl: Check) -> None:
    """Position j may attend i iff i <= j: the lower triangle, diagonal included."""
    _close(impl(4), _causal(4, 4),
           "the lower triangle with its diagonal (j may attend i iff i ≤ j)",
           "for seq_q = seq = 4")  # fmt: skip


def causal_mask_offset(impl: Check) -> None:
    """With a cache of c positions, the queries sit at c, c+1, ...: offset=c."""
    _close(impl(2, 5, offset=3), _causal(2, 5, 3),
           "the mask of queries at positions 3 and 4 over 5 keys",
           "for causal_mask(2, 5, offset=3)")  # fmt: skip


def causal_mask_matches_sdpa(impl: Check) -> None:
    """Attention under the mask equals scaled_dot_product_attention(is_causal=True)."""
    queries, keys, values = (_randn(2, 4, 3, seed=s) for s in (22, 23, 24))
    mine = F.scaled_dot_product_attention(queries, keys, values, attn_mask=impl(4))
    _close(mine, F.scaled_dot_product_attention(queries, keys, values, is_causal=True),
           "scaled_dot_product_attention(is_causal=True)",
           "when passed as its attn_mask")  # fmt: skip


def causal_mask_wrong_type(impl: Check) -> None:
    """A length that is not an int is a type error."""
    _rejects(lambda: impl(2.5), "a length of 2.5")


def padding_mask_matches_lengths(impl: Check) -> None:
    """True at the first lengths[b] positions of each sequence, False on padding."""
    lengths = torch.tensor([2, 4, 1])
    expected = torch.arange(4) < rearrange(lengths, "b -> b 1")
    _close(impl(lengths, 4), expected,
           "'True at the first lengths[b] positions' (True means a real token)",
           "for lengths [2, 4, 1] and seq 4")  # fmt: skip


def padding_mask_batched(impl: Check) -> None:
    """Any number of batch axes: lengths of shape (2, 3) give a (2, 3, seq) mask."""
    lengths = torch.tensor([[1, 2, 3], [3, 0, 2]])
    expected = torch.arange(3) < rearrange(lengths, "a b -> a b 1")
    _close(impl(lengths, 3), expected, "the padding mask", "for 2-d lengths")


def padding_mask_wrong_type(impl: Check) -> None:
    """Float lengths are a type error."""
    _rejects(lambda: impl(torch.tensor([2.0, 3.0]), 4), "float lengths")


CHECKS: dict[str, tuple[Check, ...]] = {
    "causal_mask": (causal_mask_lower_triangle, causal_mask_offset,
                    causal_mask_matches_sdpa, causal_mask_wrong_type),
    "padding_mask": (padding_mask_matches_lengths, padding_mask_batched,
                     padding_mask_wrong_type),
}  # fmt: skip
