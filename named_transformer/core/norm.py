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
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor
from torch.autograd.function import once_differentiable

from named_transformer.axes import _records_gradient, checked
from named_transformer.inside.recording import tap

__all__ = ["layer_norm", "rms_norm", "standardize"]


# --8<-- [start:standardize]
@checked
def standardize(
    inputs: Float[Tensor, "*batch layer"], eps: float = 1e-5
) -> Float[Tensor, "*batch layer"]:
    r"""$\hat X$: $X$ standardised over $\mathsf{layer}$ (biased variance).

    $$\hat X = \dfrac{X - \nfun{layer}{mean} X}{\sqrt{\nfun{layer}{var} X + \epsilon}}$$

    Its gradient is written out (``_Standardize`` below) rather than left to autograd.
    Without a gradient, PyTorch's fused ``layer_norm`` computes the same $\hat X$
    (a test checks it against the arithmetic).
    """
    if _records_gradient(inputs):
        return _Standardize.apply(inputs, eps)
    # no gradient wanted (evaluation, decoding): PyTorch's layer_norm without its
    # gamma and beta is this same X̂ in one pass over X, where the arithmetic of
    # _standardized below takes five (on one token each costs more than its sums)
    return F.layer_norm(inputs, inputs.shape[-1:], eps=eps)


def _mean(inputs: Tensor) -> Tensor:
    r"""$\nfun{layer}{mean} X$, kept as an axis of size 1 to broadcast against $X$."""
    # einops's reduce("... layer -> ... 1", "mean") makes this same call, with pattern
    # handling around it that costs about a third of a layer norm on one token
    return inputs.mean(dim=-1, keepdim=True)  # allow-raw: layer is the last axis


def _standardized(inputs: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    r"""$\hat X$ and $1/\sigma$, which the gradient needs."""
    # var_layer and mean_layer in one pass over X (biased: correction=0)
    variance, mean = torch.var_mean(  # allow-raw: layer is the last axis
        inputs, dim=-1, keepdim=True, correction=0
    )
    inverse_sigma = (variance + eps).rsqrt()
    return (inputs - mean) * inverse_sigma, inverse_sigma


class _Standardize(torch.autograd.Function):
    r"""Standardisation with its gradient in named form: for
    $G = \partial L / \partial \hat X$,

    $$\frac{\partial L}{\partial X} = \frac{1}{\sigma}\Big(G - \nfun{layer}{mean} G
      - \hat X \odot \nfun{layer}{mean} (G \odot \hat X)\Big),
      \qquad \sigma = \sqrt{\nfun{layer}{var} X + \epsilon}.$$

    Autograd would differentiate the forward pass operation by operation (two means, a
    subtraction, a square, a reciprocal square root, each with its own backward pass
    over the whole tensor); the closed form needs two means and three products.
    """

    @staticmethod
    def forward(ctx, inputs: Tensor, eps: float) -> Tensor:
        normalised, inverse_sigma = _standardized(inputs, eps)
        ctx.save_for_backward(normalised, inverse_sigma)
        return normalised

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        normalised, inverse_sigma = ctx.saved_tensors
        mean_grad = _mean(grad)
        mean_projection = _mean(grad * normalised)
        centred_grad = torch.addcmul(
            grad - mean_grad, normalised, mean_projection, value=-1.0
        )
        return centred_grad * inverse_sigma, None


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
