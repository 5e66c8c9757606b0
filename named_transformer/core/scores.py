r"""The score-function zoo: how well does each query match each key?

Every score maps queries $Q \in \mathbb R^{\mathsf{seq'} \times \mathsf{key}}$ and keys
$K \in \mathbb R^{\mathsf{seq} \times \mathsf{key}}$ (plus its own named weights, passed
as arguments) to scores over $\mathsf{seq'} \times \mathsf{seq}$; the general and
additive scores let the queries have a width of their own, $\mathsf{key'}$, and the
location score reads the queries alone. A softmax over
$\mathsf{seq}$ turns them into attention weights (the zoos of Chai and of the cars
tutorial).
"""

from __future__ import annotations

import math

import torch
from einops import rearrange, reduce
from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.contraction import einsum

__all__ = [
    "additive_score",
    "cosine_score",
    "dot_score",
    "general_score",
    "location_score",
    "scaled_dot_score",
]


# --8<-- [start:dot]
@checked
def dot_score(
    queries: Float[Tensor, "*batch seq_q key"],
    keys: Float[Tensor, "*#batch seq key"],
) -> Float[Tensor, "*batch seq_q seq"]:
    r"""Dot product: $Q \ndot{key} K$.

    No parameters; queries and keys share $\mathsf{key}$.
    """
    return einsum(queries, keys, "... seq_q key, ... seq key -> ... seq_q seq")


# --8<-- [end:dot]


# --8<-- [start:scaled_dot]
@checked
def scaled_dot_score(
    queries: Float[Tensor, "*batch seq_q key"],
    keys: Float[Tensor, "*#batch seq key"],
) -> Float[Tensor, "*batch seq_q seq"]:
    r"""Scaled dot product (the Transformer's):
    $\dfrac{Q \ndot{key} K}{\sqrt{|\mathsf{key}|}}$.

    The queries are scaled before the contraction, which touches
    $|\mathsf{seq'}|\cdot|\mathsf{key}|$ numbers instead of
    $|\mathsf{seq'}|\cdot|\mathsf{seq}|$.
    """
    return dot_score(queries / math.sqrt(queries.shape[-1]), keys)


# --8<-- [end:scaled_dot]


# --8<-- [start:general]
@checked
def general_score(
    queries: Float[Tensor, "*batch seq_q key_q"],
    keys: Float[Tensor, "*#batch seq key"],
    weight: Float[Tensor, "key_q key"],
) -> Float[Tensor, "*batch seq_q seq"]:
    r"""General (bilinear, Luong): $Q \ndot{key'} W \ndot{key} K$,
    $W \in \mathbb R^{\mathsf{key'} \times \mathsf{key}}$.

    Queries and keys may have different widths. Dot and scaled dot are the special
    cases $W = I$ and $W = I/\sqrt{|\mathsf{key}|}$.
    """
    projected = einsum(queries, weight, "... seq_q key_q, key_q key -> ... seq_q key")
    return dot_score(projected, keys)


# --8<-- [end:general]


# --8<-- [start:additive]
@checked
def additive_score(
    queries: Float[Tensor, "*batch seq_q key_q"],
    keys: Float[Tensor, "*#batch seq key"],
    w_query: Float[Tensor, "hidden key_q"],
    w_key: Float[Tensor, "hidden key"],
    w_score: Float[Tensor, " hidden"],
) -> Float[Tensor, "*batch seq_q seq"]:
    r"""Additive / concat (Bahdanau):
    $w \ndot{hidden} \tanh(W_1 \ndot{key'} Q + W_2 \ndot{key} K)$.

    Equal to $w^\top \tanh(W[q; k])$ with $W = [W_1\ W_2]$. The sum broadcasts over
    $\mathsf{seq'} \times \mathsf{seq} \times \mathsf{hidden}$: more memory and time
    than a dot product, which is why Chai calls dot-product attention "faster and
    more space-efficient".
    """
    q = einsum(queries, w_query, "... seq_q key_q, hidden key_q -> ... seq_q hidden")
    k = einsum(keys, w_key, "... seq key, hidden key -> ... seq hidden")
    joint = torch.tanh(
        rearrange(q, "... seq_q hidden -> ... seq_q 1 hidden")
        + rearrange(k, "... seq hidden -> ... 1 seq hidden")
    )
    return einsum(joint, w_score, "... seq_q seq hidden, hidden -> ... seq_q seq")


# --8<-- [end:additive]


# --8<-- [start:cosine]
@checked
def cosine_score(
    queries: Float[Tensor, "*batch seq_q key"],
    keys: Float[Tensor, "*#batch seq key"],
    eps: float = 1e-8,
) -> Float[Tensor, "*batch seq_q seq"]:
    r"""Cosine (content-based, Graves):
    $\dfrac{Q \ndot{key} K}{\|Q\|_{\mathsf{key}}\, \|K\|_{\mathsf{key}}}$.

    Norms are clamped below by ``eps`` (as `torch.nn.functional.cosine_similarity`).
    """
    q_norm = (
        reduce(queries**2, "... seq_q key -> ... seq_q", "sum").sqrt().clamp_min(eps)
    )
    k_norm = reduce(keys**2, "... seq key -> ... seq", "sum").sqrt().clamp_min(eps)
    norms = einsum(q_norm, k_norm, "... seq_q, ... seq -> ... seq_q seq")
    return dot_score(queries, keys) / norms


# --8<-- [end:cosine]


# --8<-- [start:location]
@checked
def location_score(
    queries: Float[Tensor, "*batch seq_q hidden"],
    weight: Float[Tensor, "seq hidden"],
) -> Float[Tensor, "*batch seq_q seq"]:
    r"""Location-based (Luong): $W_a \ndot{hidden} s$, from the query state alone.

    No keys: $W_a \in \mathbb R^{\mathsf{seq} \times \mathsf{hidden}}$ fixes the number
    of source positions it can score.
    """
    return einsum(queries, weight, "... seq_q hidden, seq hidden -> ... seq_q seq")


# --8<-- [end:location]
