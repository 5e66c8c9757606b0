r"""The position-wise feed-forward network.

$$\text{FFN}(X) = W^2 \ndot{hidden} \operatorname{relu}(W^1 \ndot{layer} X + b^1)
  + b^2,$$

$W^1 \in \mathbb R^{\mathsf{hidden} \times \mathsf{layer}}$,
$b^1 \in \mathbb R^{\mathsf{hidden}}$,
$W^2 \in \mathbb R^{\mathsf{layer} \times \mathsf{hidden}}$,
$b^2 \in \mathbb R^{\mathsf{layer}}$ (the paper's appendix misprints
$b^2 \in \mathbb R^{\mathsf{hidden}}$). Nothing here names $\mathsf{seq}$, so the same
network is applied at every position: it equals a kernel-size-1 convolution, the NYU
notes' "1D-convolution".

The paper's activation is ReLU; BERT uses GELU, $X \odot \Phi(X)$ with $\Phi$ the
standard normal distribution function; GPT-2 its tanh approximation; LLaMA-style models
SiLU. Models without biases (``bias=False``) drop $b^1, b^2$.

The **gated** feed-forward (Shazeer 2020, "GLU Variants Improve Transformer"; Llama,
Qwen, Mistral) multiplies the activated projection by a second, linear one before
contracting back:

$$\text{FFN}_{\text{gated}}(X) = \big(\operatorname{silu}(X \ndot{layer} W^{gate})
  \circ (X \ndot{layer} W^{up})\big) \ndot{hidden} W^{down},$$

$W^{gate}, W^{up} \in \mathbb R^{\mathsf{hidden} \times \mathsf{layer}}$,
$W^{down} \in \mathbb R^{\mathsf{layer} \times \mathsf{hidden}}$: SwiGLU with SiLU,
GEGLU with GELU. Three matrices instead of two, so Llama takes $|\mathsf{hidden}|$
about $\tfrac83|\mathsf{layer}|$ rather than $4|\mathsf{layer}|$ for the same count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.core import fast
from named_transformer.recording import tap

__all__ = ["feed_forward", "gated_feed_forward", "gelu", "gelu_tanh", "relu", "silu"]


# --8<-- [start:relu]
@checked
@fast.stand_in(fast.relu)
def relu(inputs: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch hidden"]:
    r"""$\operatorname{relu}(X) = \max(X, 0)$ elementwise."""
    return torch.relu(inputs)


# --8<-- [end:relu]


# --8<-- [start:gelu]
@checked
def gelu(inputs: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch hidden"]:
    r"""$\operatorname{gelu}(X) = X \odot \Phi(X)
    = X \odot \tfrac12\left(1 + \operatorname{erf}(X/\sqrt 2)\right)$ (BERT)."""
    return F.gelu(inputs)


@checked
def gelu_tanh(
    inputs: Float[Tensor, "*batch hidden"],
) -> Float[Tensor, "*batch hidden"]:
    r"""GELU with $\Phi$ approximated by tanh (GPT-2's ``gelu_new``):

    $$X \odot \tfrac12\left(1 + \tanh\left(\sqrt{2/\pi}\,
      (X + 0.044715\,X^3)\right)\right).$$
    """
    return F.gelu(inputs, approximate="tanh")


@checked
def silu(inputs: Float[Tensor, "*batch hidden"]) -> Float[Tensor, "*batch hidden"]:
    r"""$\operatorname{silu}(X) = X \odot \sigma(X)$, the logistic sigmoid
    gating its own input."""
    return F.silu(inputs)


# --8<-- [end:gelu]


Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": relu,
    "gelu": gelu,
    "gelu_tanh": gelu_tanh,
    "silu": silu,
}
"""The feed-forward activations by name: ``relu`` (the paper), ``gelu`` (BERT),
``gelu_tanh`` (GPT-2's ``gelu_new``) and ``silu``; the modules
(:mod:`named_transformer.models.sublayers`) take one by its name."""

_HIDDEN = "*batch hidden"  # position-wise: the positions are among the batch axes


# --8<-- [start:feed_forward]
@checked
def feed_forward(
    inputs: Float[Tensor, "*batch layer"],
    w1: Float[Tensor, "hidden layer"],
    b1: Float[Tensor, " hidden"] | None,
    w2: Float[Tensor, "layer hidden"],
    b2: Float[Tensor, " layer"] | None,
    activation: Callable[[Tensor], Tensor] = relu,
) -> Float[Tensor, "*batch layer"]:
    r"""$W^2 \ndot{hidden} \operatorname{relu}(W^1 \ndot{layer} X + b^1) + b^2$
    (``activation`` may be GELU or SiLU; a bias of None is left out)."""
    hidden = einsum(inputs, w1, "... layer, hidden layer -> ... hidden")
    hidden = tap("hidden", fast.plus_bias(hidden, b1), _HIDDEN)  # + b1
    hidden = tap("activated", activation(hidden), _HIDDEN)
    outputs = einsum(hidden, w2, "... hidden, layer hidden -> ... layer")
    return fast.plus_bias(outputs, b2)  # + b2


# --8<-- [end:feed_forward]


# --8<-- [start:gated_feed_forward]
@checked
def gated_feed_forward(
    inputs: Float[Tensor, "*batch layer"],
    w_gate: Float[Tensor, "hidden layer"],
    w_up: Float[Tensor, "hidden layer"],
    w_down: Float[Tensor, "layer hidden"],
    b_gate: Float[Tensor, " hidden"] | None = None,
    b_up: Float[Tensor, " hidden"] | None = None,
    b_down: Float[Tensor, " layer"] | None = None,
    activation: Callable[[Tensor], Tensor] = silu,
) -> Float[Tensor, "*batch layer"]:
    r"""$\big(\operatorname{silu}(X \ndot{layer} W^{gate} + b^{gate})
    \circ (X \ndot{layer} W^{up} + b^{up})\big) \ndot{hidden} W^{down} + b^{down}$
    (``activation`` may be GELU; a bias of None is left out, as in Llama)."""
    gate = einsum(inputs, w_gate, "... layer, hidden layer -> ... hidden")
    up = einsum(inputs, w_up, "... layer, hidden layer -> ... hidden")
    gate = tap("gate", fast.plus_bias(gate, b_gate), _HIDDEN)  # + b_gate
    up = tap("up", fast.plus_bias(up, b_up), _HIDDEN)  # + b_up
    hidden = tap("activated", activation(gate) * up, _HIDDEN)
    outputs = einsum(hidden, w_down, "... hidden, layer hidden -> ... layer")
    return fast.plus_bias(outputs, b_down)  # + b_down


# --8<-- [end:gated_feed_forward]
