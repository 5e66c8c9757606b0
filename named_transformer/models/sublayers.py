r"""The pieces around attention: LayerNorm, the feed-forward network, the residual
sublayer.

Every sublayer $f$ of the Transformer (self-attention, cross-attention, feed-forward)
sits in a residual connection with a LayerNorm. The paper (and Chai, the NYU
notes and dataflowr) normalises *after* the sum, **post-norm**:

$$X' = \text{LayerNorm}(X + \text{Dropout}(f(X))).$$

The Annotated Transformer, GPT-2 and most models since normalise *before* the sublayer,
**pre-norm**, leaving an identity path from input to output:

$$X' = X + \text{Dropout}(f(\text{LayerNorm}(X))).$$

The two are not the same function. Post-norm is what the paper trained (with
learning-rate warm-up); pre-norm trains deep stacks more stably without warm-up (Xiong
et al. 2020, "On Layer Normalization in the Transformer Architecture") but its output
grows with depth, so pre-norm stacks add a final LayerNorm (PyTorch's
``nn.Transformer`` always has one). Post-norm is the default here; ``norm_first=True``
selects pre-norm, PyTorch's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from jaxtyping import Float
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.dropout import dropout
from named_transformer.core.feedforward import feed_forward, gelu, gelu_tanh, relu, silu
from named_transformer.core.norm import layer_norm

__all__ = ["ACTIVATIONS", "Activation", "FeedForward", "LayerNorm", "Residual"]

Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": relu,
    "gelu": gelu,
    "gelu_tanh": gelu_tanh,
    "silu": silu,
}
"""The feed-forward activations by name: ``relu`` (the paper), ``gelu`` (BERT),
``gelu_tanh`` (GPT-2's ``gelu_new``) and ``silu``."""


# --8<-- [start:LayerNorm]
class LayerNorm(nn.Module):
    r"""$\nfun{layer}{standardize}(X) \odot \gamma + \beta$ with learned
    $\gamma, \beta$ (no $\beta$ with ``bias=False``).

    ``eps`` is the model's: $10^{-5}$ in PyTorch and GPT-2, $10^{-12}$ in BERT.
    """

    def __init__(self, layer: int, eps: float = 1e-5, *, bias: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(layer))
        self.beta = nn.Parameter(torch.zeros(layer)) if bias else None

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch layer"]
    ) -> Float[Tensor, "*batch layer"]:
        return layer_norm(inputs, self.gamma, self.beta, self.eps)


# --8<-- [end:LayerNorm]


# --8<-- [start:FeedForward]
class FeedForward(nn.Module):
    r"""$W^2 \ndot{hidden} \operatorname{relu}(W^1 \ndot{layer} X + b^1) + b^2$ at every
    position.

    ``activation`` names one of :data:`ACTIVATIONS` (the paper's is ``"relu"``).
    ``dropout`` drops hidden units after the activation, where PyTorch's
    ``TransformerEncoderLayer`` does. ``bias=False`` leaves out $b^1$ and $b^2$.
    """

    def __init__(
        self,
        layer: int,
        hidden: int,
        *,
        activation: Activation = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}"
            )
        self.activation, self.dropout = activation, dropout
        bound1, bound2 = layer**-0.5, hidden**-0.5  # nn.Linear's default ranges
        self.w1 = nn.Parameter(torch.empty(hidden, layer).uniform_(-bound1, bound1))
        # registered in the order w1, b1, w2, b2 that saved optimizer states expect
        self.b1 = nn.Parameter(torch.empty(hidden).uniform_(-bound1, bound1))
        self.w2 = nn.Parameter(torch.empty(layer, hidden).uniform_(-bound2, bound2))
        self.b2 = nn.Parameter(torch.empty(layer).uniform_(-bound2, bound2))
        if not bias:
            self.b1 = self.b2 = None

    def _activate(self, hidden: Tensor) -> Tensor:
        hidden = ACTIVATIONS[self.activation](hidden)
        return dropout(hidden, self.dropout, self.training)

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch layer"]
    ) -> Float[Tensor, "*batch layer"]:
        return feed_forward(inputs, self.w1, self.b1, self.w2, self.b2, self._activate)


# --8<-- [end:FeedForward]


# --8<-- [start:Residual]
class Residual(nn.Module):
    r"""A residual sublayer connection with its LayerNorm, post-norm or pre-norm.

    Post-norm (default, the paper): $\text{LayerNorm}(X + \text{Dropout}(f(X)))$.
    Pre-norm (``norm_first=True``): $X + \text{Dropout}(f(\text{LayerNorm}(X)))$.
    ``bias=False`` leaves out the LayerNorm's $\beta$.
    """

    def __init__(
        self,
        layer: int,
        *,
        dropout: float = 0.0,
        norm_first: bool = False,
        eps: float = 1e-5,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.norm = LayerNorm(layer, eps, bias=bias)
        self.dropout, self.norm_first = dropout, norm_first

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq layer"],
        sublayer: Callable[[Tensor], Tensor],
    ) -> Float[Tensor, "*batch seq layer"]:
        if self.norm_first:
            return inputs + self._drop(sublayer(self.norm(inputs)))
        return self.norm(inputs + self._drop(sublayer(inputs)))

    def _drop(self, outputs: Tensor) -> Tensor:
        return dropout(outputs, self.dropout, self.training)


# --8<-- [end:Residual]
