r"""Block quantisation as llama.cpp stores weights: Q4_1 and Q8_0 written as named
equations.

A row of a weight matrix is cut into blocks of 32 weights. Each block keeps a scale
$d$ (a float16) and, in Q4_1, a minimum $m$; each weight becomes a small integer $q$.
Reading a weight back is one affine map per block:

$$\begin{aligned}
  \text{Q4\_1:}\quad w_{\mathsf{weights}} &= d\, q_{\mathsf{weights}} + m,
    && q \in \{0, \dots, 15\}; \\
  \text{Q8\_0:}\quad w_{\mathsf{weights}} &= d\, q_{\mathsf{weights}},
    && q \in \{-128, \dots, 127\}.
\end{aligned}$$

A Q4_1 block is 20 bytes: $d$, $m$, then 16 bytes each holding two 4-bit $q$ (the
low half of byte $j$ is weight $j$, the high half weight $j + 16$): 5 bits per weight
instead of float32's 32. A Q8_0 block is 34 bytes: $d$ and 32 signed bytes. These
functions are the equations, checked equal to the ``gguf`` package's dequantisation
(which :func:`~named_transformer.interop.gguf.from_gguf` uses).
"""

from __future__ import annotations

import torch
from einops import rearrange
from jaxtyping import Float, UInt
from torch import Tensor

from named_transformer.axes import checked

__all__ = ["BLOCK", "dequantize_q4_1", "dequantize_q8_0"]

BLOCK = 32  # weights per block


def _blocks(raw: Tensor, size: int) -> Tensor:
    """A row of bytes cut into its blocks of ``size`` bytes: rows blocks bytes."""
    return rearrange(raw, "rows (blocks bytes) -> rows blocks bytes", bytes=size)


def _rows(weights: Tensor) -> Tensor:
    """The blocks' weights laid end to end again: rows (blocks weights)."""
    return rearrange(weights, "rows blocks weights -> rows (blocks weights)")


def _halves(raw: Tensor, start: int) -> Tensor:
    """The float16 stored at bytes ``start``, ``start`` + 1 of every block."""
    pair = raw[..., start : start + 2].contiguous()
    return pair.view(torch.float16).float()  # allow-raw: two bytes read as a float16


# --8<-- [start:dequantize_q4_1]
@checked
def dequantize_q4_1(
    raw: UInt[Tensor, "rows bytes"],
) -> Float[Tensor, "rows columns"]:
    r"""$w = d\,q + m$ per block of 32: Q4_1's rows of bytes as float32 weights."""
    blocks = _blocks(raw, 20)
    scale, minimum = _halves(blocks, 0), _halves(blocks, 2)  # rows blocks 1
    packed = blocks[..., 4:]  # rows blocks pairs: two 4-bit q in each byte
    low, high = packed & 0x0F, packed >> 4
    q = rearrange([low, high], "two rows blocks pairs -> rows blocks (two pairs)")
    return _rows(scale * q.float() + minimum)


# --8<-- [end:dequantize_q4_1]


# --8<-- [start:dequantize_q8_0]
@checked
def dequantize_q8_0(
    raw: UInt[Tensor, "rows bytes"],
) -> Float[Tensor, "rows columns"]:
    r"""$w = d\,q$ per block of 32: Q8_0's rows of bytes as float32 weights."""
    blocks = _blocks(raw, 34)
    q = blocks[..., 2:].contiguous().view(torch.int8)  # allow-raw: signed bytes
    return _rows(_halves(blocks, 0) * q.float())


# --8<-- [end:dequantize_q8_0]
