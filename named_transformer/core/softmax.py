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

from named_transformer.axes import _autocast, _records_gradient, checked
from named_transformer.core.masks import _plus_terms, additive_mask

__all__ = ["hardmax", "softmax", "softmax_"]


# --8<-- [start:softmax]
@checked
def softmax(
    scores: Float[Tensor, "*batch seq"],
    mask: Bool[Tensor, "*#batch #seq"] | None = None,
    beta: float = 1.0,
) -> Float[Tensor, "*batch seq"]:
    r"""$\nfun{seq}{softmax}(\beta X + M)$: normalise along the last axis, `seq`.

    ``mask`` is True where a position may be attended: $M$ is $-\infty$ elsewhere
    (:func:`~named_transformer.core.masks.additive_mask`), so masked positions get
    weight exactly 0. A row with no allowed position returns all zeros (and zero
    gradient), never NaN: its $M$ is left 0 and its weights are multiplied by 0. (Its
    scores must then be finite: a row of $-\infty$, a bias added beforehand, gives
    NaN; :func:`~named_transformer.core.attention.attention_weights` takes a bias as
    ``score_bias`` and gives zeros.)
    """
    if beta != 1.0:  # skip a pass over the whole score tensor in the common case
        scores = beta * scores
    return _softmax(scores, mask, overwrite=beta != 1.0)  # beta X is a fresh table


@checked
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
    return _softmax(scores, mask, overwrite=True)


def _softmax(scores: Tensor, mask: Tensor | None, overwrite: bool) -> Tensor:
    r"""$\nfun{seq}{softmax}(X + M)$; without a gradient, in one table: ``scores``
    where ``overwrite`` allows, else the fresh $X + M$."""
    new_table = _new_table(scores)
    if mask is None:
        reuse = overwrite and not new_table
        return torch.softmax(scores, dim=-1, out=scores if reuse else None)
    # the row has a key to attend (reduce(mask, "... seq -> ... 1", "any"), without
    # einops' dispatch, which costs more than the reduction on a mask this small)
    alive = mask.any(dim=-1, keepdim=True)
    blocked = additive_mask(mask | ~alive, scores.dtype)  # an empty row: M = 0
    into = overwrite and not new_table  # else X + M is the fresh table
    masked = _plus_terms(scores, blocked) if into else scores + blocked
    return _alive_rows(masked, alive, new_table)


def _alive_rows(scores: Tensor, alive: Tensor, new_table: bool) -> Tensor:
    r"""$\nfun{seq}{softmax}(X) \odot$ ``alive``, the weights over ``scores`` (a fresh
    table) unless ``new_table``: the rows with no key to attend become zeros (their
    scores must be finite)."""
    if new_table:
        return torch.softmax(scores, dim=-1) * alive
    return torch.softmax(scores, dim=-1, out=scores).mul_(alive)


def _new_table(scores: Tensor) -> bool:
    """Whether a softmax of ``scores`` must make a new table rather than write over
    them: autograd keeps softmax's output, and autocast does not cast a result given
    ``out=``."""
    return _records_gradient(scores) or _autocast(scores.device)


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
