r"""Dropout: zero each entry with probability $p$ while training, and rescale the rest.

$$\text{Dropout}_p(X) = \frac{X \odot M}{1 - p}, \qquad
  M_i \sim \text{Bernoulli}(1 - p),$$

so the expected value of every entry is unchanged and evaluation needs no correction.
The Transformer applies it to the attention weights, to each sublayer's output before
the residual sum, to the embeddings plus positions, and (PyTorch's choice) to the hidden
units of the feed-forward network.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked

__all__ = ["dropout"]


# --8<-- [start:dropout]
@checked
def dropout(
    inputs: Float[Tensor, "*batch"], p: float, training: bool
) -> Float[Tensor, "*batch"]:
    r"""$X \odot M / (1 - p)$ while ``training`` (and $p > 0$), else $X$ unchanged.

    Eager, this is PyTorch's fused ``F.dropout``. Under ``torch.compile`` the mask is
    drawn as floats, $M = \lfloor U + 1 - p \rfloor$ with $U \sim \text{Uniform}[0, 1)$
    (1 with probability $1 - p$): PyTorch's form draws $U \ge p$, a boolean mask, which
    the compiler keeps for the backward pass and its CPU code stores and loads slowly.
    """
    if not training or p == 0.0:
        return inputs
    if torch.compiler.is_compiling():
        keep = torch.floor(torch.rand_like(inputs) + (1.0 - p))
        return inputs * keep * (1.0 / (1.0 - p))
    return F.dropout(inputs, p, training)


# --8<-- [end:dropout]
