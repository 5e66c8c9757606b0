r"""Standardisation and layer normalisation over the $\mathsf{layer}$ axis.

$$\nfun{layer}{standardize}(X)
  = \frac{X - \nfun{layer}{mean} X}{\sqrt{\nfun{layer}{var} X + \epsilon}},
\qquad \text{LayerNorm}(X) = \nfun{layer}{standardize}(X) \odot \gamma + \beta,$$

with $\gamma, \beta \in \mathbb R^{\mathsf{layer}}$. The variance is the biased one
(divide by $|\mathsf{layer}|$), as in `torch.nn.functional.layer_norm`; dataflowr writes
the same thing without $\epsilon$.

RMSNorm (Zhang & Sennrich 2019; Llama, Qwen, Mistral) drops the centring and the shift:
it divides by the root mean square alone,

$$\text{RMSNorm}(X) = \frac{X}{\sqrt{\nfun{layer}{mean}(X^2) + \epsilon}} \odot g.$$
"""

from __future__ import annotations

import torch
from einops import reduce
from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core import fast
from named_transformer.recording import tap

__all__ = ["layer_norm", "rms_norm", "standardize"]


# --8<-- [start:standardize]
@checked
@fast.stand_in(fast.standardize)
def standardize(
    inputs: Float[Tensor, "*batch layer"], eps: float = 1e-5
) -> Float[Tensor, "*batch layer"]:
    r"""$\hat X$: $X$ standardised over $\mathsf{layer}$ (biased variance).

    $$\hat X = \dfrac{X - \nfun{layer}{mean} X}{\sqrt{\nfun{layer}{var} X + \epsilon}}$$
    """
    mean = reduce(inputs, "... layer -> ... 1", "mean")
    variance = reduce((inputs - mean) ** 2, "... layer -> ... 1", "mean")
    return (inputs - mean) / torch.sqrt(variance + eps)


# --8<-- [end:standardize]


# --8<-- [start:layer_norm]
@checked
def layer_norm(
    inputs: Float[Tensor, "*batch layer"],
    gamma: Float[Tensor, " layer"],
    beta: Float[Tensor, " layer"] | None,
    eps: float = 1e-5,
) -> Float[Tensor, "*batch layer"]:
    r"""$\nfun{layer}{standardize}(X) \odot \gamma + \beta$ ($\beta$ None: no
    shift, as PyTorch's ``bias=False``)."""
    standardized = tap("standardized", standardize(inputs, eps), "*batch layer")
    if beta is None:
        return standardized * gamma
    # beta + x̂ ⊙ gamma, one pass
    return torch.addcmul(beta, standardized, gamma)


# --8<-- [end:layer_norm]


# --8<-- [start:rms_norm]
@checked
def rms_norm(
    inputs: Float[Tensor, "*batch layer"],
    gain: Float[Tensor, " layer"],
    eps: float = 1e-6,
) -> Float[Tensor, "*batch layer"]:
    r"""$\dfrac{X}{\sqrt{\nfun{layer}{mean}(X^2) + \epsilon}} \odot g$: no centring,
    no shift (Zhang & Sennrich 2019).

    The mean square is taken in float32 at least (float64 for a float64 model), and the
    normalised $X$ returns to the inputs' dtype before the gain, as Llama's
    ``LlamaRMSNorm`` does: a half-precision model then normalises as its reference.
    """
    wide = inputs.to(torch.promote_types(inputs.dtype, torch.float32))
    mean_square = (wide * wide).mean(  # allow-raw: mean_layer, the last axis
        dim=-1, keepdim=True
    )
    scaled = (wide * (mean_square + eps).rsqrt()).to(inputs.dtype)
    return tap("scaled", scaled, "*batch layer") * gain


# --8<-- [end:rms_norm]
