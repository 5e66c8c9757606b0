r"""Standardisation and layer normalisation over the $\mathsf{layer}$ axis.

$$\nfun{layer}{standardize}(X) = \frac{X - \nfun{layer}{mean} X}{\sqrt{\nfun{layer}{var} X + \epsilon}},
\qquad \text{LayerNorm}(X) = \nfun{layer}{standardize}(X) \odot \gamma + \beta,$$

with $\gamma, \beta \in \mathbb R^{\mathsf{layer}}$. The variance is the biased one
(divide by $|\mathsf{layer}|$), as in `torch.nn.functional.layer_norm`; seed 05 writes
the same thing without $\epsilon$.
"""

from __future__ import annotations

import torch
from einops import reduce
from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked

__all__ = ["layer_norm", "standardize"]


# --8<-- [start:standardize]
@checked
def standardize(
    inputs: Float[Tensor, "*batch layer"], eps: float = 1e-5
) -> Float[Tensor, "*batch layer"]:
    r"""$\dfrac{X - \nfun{layer}{mean} X}{\sqrt{\nfun{layer}{var} X + \epsilon}}$ (biased variance)."""
    mean = reduce(inputs, "... layer -> ... 1", "mean")
    centred = inputs - mean
    variance = reduce(centred * centred, "... layer -> ... 1", "mean")  # x * x: pow backward is slower
    return centred * (variance + eps).rsqrt()
# --8<-- [end:standardize]


# --8<-- [start:layer_norm]
@checked
def layer_norm(
    inputs: Float[Tensor, "*batch layer"],
    gamma: Float[Tensor, " layer"],
    beta: Float[Tensor, " layer"],
    eps: float = 1e-5,
) -> Float[Tensor, "*batch layer"]:
    r"""$\nfun{layer}{standardize}(X) \odot \gamma + \beta$."""
    return torch.addcmul(beta, standardize(inputs, eps), gamma)  # beta + x̂ ⊙ gamma, one pass
# --8<-- [end:layer_norm]
