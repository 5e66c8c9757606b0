r"""Softmax over a named axis, with inverse temperature, and its hard limit.

The NYU notes write the attention weights as
$\mathbf a = \text{[soft](arg)max}_\beta(\mathbf K^\top \mathbf q)$: soft attention
keeps $\|\mathbf a\|_1 = 1$, hard attention is the one-hot argmax,
$\|\mathbf a\|_0 = 1$, reached as the inverse temperature $\beta \to \infty$. In named
notation the axis that is normalised is written beneath the operator:

$$\nfun{seq}{softmax}(\beta X)
  = \frac{\exp \beta X}{\sum_{\mathsf{seq}} \exp \beta X}.$$
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float
from torch import Tensor
from torch.nn.functional import one_hot

from named_transformer.axes import checked

__all__ = ["hardmax", "softmax"]


# --8<-- [start:softmax]
@checked
def softmax(
    scores: Float[Tensor, "*batch seq"],
    mask: Bool[Tensor, "*#batch #seq"] | None = None,
    beta: float = 1.0,
) -> Float[Tensor, "*batch seq"]:
    r"""$\nfun{seq}{softmax}(\beta X + M)$: normalise along the last axis, `seq`.

    ``mask`` is True where a position may be attended; masked positions get weight
    exactly 0. A row with no allowed position returns all zeros (and zero gradient),
    never NaN: it is filled with the dtype's most negative finite number rather than
    $-\infty$, then multiplied by the mask.
    """
    if beta != 1.0:  # skip a pass over the whole score tensor in the common case
        scores = beta * scores
    if mask is None:
        return torch.softmax(scores, dim=-1)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1) * mask


# --8<-- [end:softmax]


# --8<-- [start:hardmax]
@checked
def hardmax(
    scores: Float[Tensor, "*batch seq"],
    mask: Bool[Tensor, "*#batch #seq"] | None = None,
) -> Float[Tensor, "*batch seq"]:
    r"""Hard attention: the one-hot $\nfun{seq}{argmax}$, the $\beta \to \infty$ limit.

    Ties go to the first position; a fully masked row is all zeros.
    """
    if mask is not None:
        scores = scores.masked_fill(~mask, -torch.inf)
    best = scores.argmax(dim=-1)  # allow-raw: argmax along seq
    winner = one_hot(best, scores.shape[-1])
    if mask is not None:
        winner = winner * mask  # a fully masked row has no winner
    return winner.to(scores.dtype)


# --8<-- [end:hardmax]
