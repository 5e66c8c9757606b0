r"""The position-wise feed-forward network.

$$\text{FFN}(X) = W^2 \ndot{hidden} \operatorname{relu}(W^1 \ndot{layer} X + b^1) + b^2,$$

$W^1 \in \mathbb R^{\mathsf{hidden} \times \mathsf{layer}}$, $b^1 \in \mathbb R^{\mathsf{hidden}}$,
$W^2 \in \mathbb R^{\mathsf{layer} \times \mathsf{hidden}}$, $b^2 \in \mathbb R^{\mathsf{layer}}$
(the paper's appendix misprints $b^2 \in \mathbb R^{\mathsf{hidden}}$). Nothing here
names $\mathsf{seq}$, so the same network is applied at every position: it equals a
kernel-size-1 convolution, seed 04's "1D-convolution".
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from einops import einsum
from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked

__all__ = ["feed_forward"]


# --8<-- [start:feed_forward]
@checked
def feed_forward(
    inputs: Float[Tensor, "*batch layer"],
    w1: Float[Tensor, "hidden layer"],
    b1: Float[Tensor, " hidden"],
    w2: Float[Tensor, "layer hidden"],
    b2: Float[Tensor, " layer"],
    activation: Callable[[Tensor], Tensor] = torch.relu,
) -> Float[Tensor, "*batch layer"]:
    r"""$W^2 \ndot{hidden} \operatorname{relu}(W^1 \ndot{layer} X + b^1) + b^2$ (``activation`` may be GELU)."""
    hidden = activation(einsum(inputs, w1, "... layer, hidden layer -> ... hidden") + b1)
    return einsum(hidden, w2, "... hidden, layer hidden -> ... layer") + b2
# --8<-- [end:feed_forward]
