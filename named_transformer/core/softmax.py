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
from einops import reduce
from jaxtyping import Bool, Float
from torch import Tensor
from torch.nn.functional import one_hot

from named_transformer.axes import checked
from named_transformer.core import fast
from named_transformer.core.masks import additive_mask

__all__ = ["hardmax", "softmax", "softmax_"]


# --8<-- [start:softmax]
@checked
@fast.stand_in(fast.softmax)
def softmax(
    scores: Float[Tensor, "*batch seq"],
    mask: Bool[Tensor, "*#batch #seq"] | None = None,
    beta: float = 1.0,
) -> Float[Tensor, "*batch seq"]:
    r"""$\nfun{seq}{softmax}(\beta X + M)$: normalise along the last axis, `seq`.

    ``mask`` is True where a position may be attended: $M$ is $-\infty$ elsewhere
    (:func:`~named_transformer.core.masks.additive_mask`), so masked positions get
    weight exactly 0. A row with no allowed position returns all zeros (and zero
    gradient), never NaN: its $M$ is left 0 and its weights are multiplied by 0.
    """
    scores = beta * scores
    if mask is not None:  # a row with no allowed key keeps M = 0, then weighs 0
        alive = reduce(mask, "... seq -> ... 1", "any")
        scores = scores + additive_mask(mask | ~alive, scores.dtype)
    # exp(X - max X) / sum exp(X - max X): the same quotient, with no overflow
    exp = torch.exp(scores - reduce(scores, "... seq -> ... 1", "max"))
    weights = exp / reduce(exp, "... seq -> ... 1", "sum")
    return weights if mask is None else weights * alive


# --8<-- [end:softmax]


@checked
@fast.stand_in(fast.softmax_)
def softmax_(
    scores: Float[Tensor, "*batch seq"],
    mask: Bool[Tensor, "*#batch #seq"] | None = None,
) -> Float[Tensor, "*batch seq"]:
    r""":func:`softmax`, written over ``scores`` where it can (in place, PyTorch's
    trailing underscore), for a table no one else reads: on the CPU a fresh table of
    the scores' size can cost more, in page faults, than the arithmetic. Use what it
    returns, and nothing of ``scores`` after it: a new table while a gradient is
    recorded for ``scores``, under autocast (which computes a softmax in float32)
    and for a mask with more axes than the scores."""
    return softmax(scores, mask)  # the equation; the table written over is below


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
