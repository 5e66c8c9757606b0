r"""Basic self-attention: no parameters at all (Bloem).

Each output is a weighted average of the inputs, weighted by how similar the inputs
are to it. With $X \in \mathbb R^{\mathsf{seq} \times \mathsf{layer}}$:

$$Y = \left(\nfun{seq}{softmax}
  \left(X \ndot{layer} X_{\mathsf{seq}\to\mathsf{seq'}}\right)\right) \ndot{seq} X.$$

Permuting the positions of $X$ permutes the rows of $Y$ the same way: attention is
*permutation equivariant*, which is why the Transformer needs positional encodings.
"""

from __future__ import annotations

from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core.attention import attend
from named_transformer.core.scores import dot_score
from named_transformer.core.softmax import softmax

__all__ = ["basic_self_attention"]


# --8<-- [start:basic_self_attention]
@checked
def basic_self_attention(
    inputs: Float[Tensor, "*batch seq layer"],
) -> Float[Tensor, "*batch seq layer"]:
    r"""Basic self-attention, unscaled and unparameterised:

    $$\left(\nfun{seq}{softmax}(X \ndot{layer} X_{\mathsf{seq}\to\mathsf{seq'}})\right)
      \ndot{seq} X$$
    """
    weights = softmax(dot_score(inputs, inputs))  # the first `inputs` plays seq_q
    return attend(weights, inputs)


# --8<-- [end:basic_self_attention]
