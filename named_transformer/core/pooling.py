r"""Feed-forward attention pooling: attention without a query (Raffel & Ellis, 2015).

Chai's attention zoo cites it as "FF-FC attention". A small network $a$ scores each
state on its own, the scores are normalised over $\mathsf{seq}$, and the context is the
weighted average of the states:

$$e = a(h), \qquad \alpha = \nfun{seq}{softmax}\, e, \qquad c = \alpha \ndot{seq} h,$$

with $a(h) = w \ndot{hidden} \tanh(W \ndot{layer} h + b)$. Padding positions get weight
zero, so the length of the padding changes nothing.

*Mean pooling* is the same average with the weights fixed instead of learned: uniform
over the real tokens, $\alpha = m / \sum_{\mathsf{seq}} m$ for the padding mask
$m \in \{0, 1\}^{\mathsf{seq}}$. Sentence-embedding models (Sentence-BERT, MiniLM) pool
this way and then scale the vector to unit length, so that a dot product of two
embeddings is their cosine similarity.
"""

from __future__ import annotations

import torch
from einops import reduce
from jaxtyping import Bool, Float
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.core.softmax import softmax

__all__ = [
    "attention_pooling",
    "attention_pooling_weights",
    "l2_normalize",
    "mean_pooling",
]


# --8<-- [start:attention_pooling_weights]
@checked
def attention_pooling_weights(
    states: Float[Tensor, "*batch seq layer"],
    w_hidden: Float[Tensor, "hidden layer"],
    b_hidden: Float[Tensor, " hidden"],
    w_score: Float[Tensor, " hidden"],
    mask: Bool[Tensor, "*#batch #seq"] | None = None,
) -> Float[Tensor, "*batch seq"]:
    r"""The weights $\alpha$: one per state, normalised over $\mathsf{seq}$.

    $$\alpha = \nfun{seq}{softmax}
      \left(w \ndot{hidden} \tanh(W \ndot{layer} h + b)\right).$$
    """
    hidden = einsum(states, w_hidden, "... seq layer, hidden layer -> ... seq hidden")
    scores = einsum(
        torch.tanh(hidden + b_hidden), w_score, "... seq hidden, hidden -> ... seq"
    )
    return softmax(scores, mask)


# --8<-- [end:attention_pooling_weights]


# --8<-- [start:attention_pooling]
@checked
def attention_pooling(
    states: Float[Tensor, "*batch seq layer"],
    w_hidden: Float[Tensor, "hidden layer"],
    b_hidden: Float[Tensor, " hidden"],
    w_score: Float[Tensor, " hidden"],
    mask: Bool[Tensor, "*#batch #seq"] | None = None,
) -> Float[Tensor, "*batch layer"]:
    r"""$c = \alpha \ndot{seq} h$: one vector per sequence, a weighted average of its
    states."""
    weights = attention_pooling_weights(states, w_hidden, b_hidden, w_score, mask)
    return einsum(weights, states, "... seq, ... seq layer -> ... layer")


# --8<-- [end:attention_pooling]


# --8<-- [start:mean_pooling]
@checked
def mean_pooling(
    states: Float[Tensor, "*batch seq layer"],
    mask: Bool[Tensor, "*#batch seq"] | None = None,
) -> Float[Tensor, "*batch layer"]:
    r"""$\dfrac{m \ndot{seq} h}{\sum_{\mathsf{seq}} m}$: the average of the real
    tokens' states ($m$ = ``mask``, True on real tokens; all tokens when None).

    A sequence with no real token gives zeros (the count is clamped at $10^{-9}$, as
    Sentence-BERT does).
    """
    if mask is None:
        return reduce(states, "... seq layer -> ... layer", "mean")
    weights = mask.to(states.dtype)
    total = einsum(weights, states, "... seq, ... seq layer -> ... layer")
    count = reduce(weights, "... seq -> ... 1", "sum").clamp(min=1e-9)
    return total / count


# --8<-- [end:mean_pooling]


# --8<-- [start:l2_normalize]
@checked
def l2_normalize(
    inputs: Float[Tensor, "*batch layer"], eps: float = 1e-12
) -> Float[Tensor, "*batch layer"]:
    r"""$\dfrac{x}{\max(\lVert x \rVert_{\mathsf{layer}}, \epsilon)}$, with
    $\lVert x \rVert_{\mathsf{layer}} = \sqrt{x \ndot{layer} x}$: unit length
    along $\mathsf{layer}$."""
    length = reduce(inputs * inputs, "... layer -> ... 1", "sum").sqrt()
    return inputs / length.clamp(min=eps)


# --8<-- [end:l2_normalize]
