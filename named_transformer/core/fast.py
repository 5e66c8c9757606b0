r"""The speed level: the core's equations, written again for speed, and tested equal.

The Learn pages show each equation as it reads: a softmax is
$\exp X / \sum_{\mathsf{seq}} \exp X$, a bias is added with ``+``. The functions here
compute the same numbers with the tricks that make a plain call as fast as PyTorch's:

- a table written over: a sum added into the product that has just made it
  (:func:`plus_into`, :func:`plus_bias`), the weights written over the scores
  (:func:`normalise`), when nothing else reads the table and no gradient is recorded
  (:func:`needs_new_table`: autograd keeps softmax's output, and autocast does not
  cast a result given ``out=``);
- PyTorch's fused kernels where they compute the same function
  (``torch.softmax``, ``F.layer_norm`` without a gradient, and
  ``scaled_dot_product_attention`` for a plain ``attention`` call on the CPU:
  :func:`fused_kernel_computes`, :func:`attention`);
- gradients written out by hand where autograd would take one backward pass per
  operation (:class:`Standardize`), or where the compiler would keep a boolean mask
  (:class:`ReLU`).

An equation that one of these replaces says so with :func:`stand_in`: calling it runs
the function here, and its own body stays as the checked function's ``.equation``, which
``tests/test_fast.py`` compares against the one that runs (values and gradients in
float64, fully masked rows, ``no_grad``, autocast, ``torch.compile``). Nothing here is
checked: the equation that stands over it checks its call once. (The other speed-ups,
the contraction plan of ``named_transformer.contraction`` and the quick shape check of
``named_transformer.axes``, stand in for ``einops.einsum`` and for jaxtyping's check
the same way; the Performance page lists them all.)
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.nn.functional as F
from einops import rearrange, reduce
from torch import Tensor
from torch.autograd.function import once_differentiable

from named_transformer.axes import _autocast, _fits, _records_gradient
from named_transformer.core.masks import causal_mask
from named_transformer.core.scores import scaled_dot_score

__all__ = [
    "ReLU",
    "Standardize",
    "attention",
    "attention_weights",
    "biased_softmax",
    "computes_every_tile",
    "fused_kernel_computes",
    "is_causal_rule",
    "mean_over_layer",
    "needs_new_table",
    "normalise",
    "plus_bias",
    "plus_into",
    "relu",
    "softmax",
    "softmax_",
    "softmax_of_alive_rows",
    "stand_in",
    "standardize",
    "standardized",
]

_F = TypeVar("_F", bound=Callable)


def stand_in(
    faster: Callable, where: Callable[..., bool] | None = None
) -> Callable[[_F], _F]:
    """Mark the decorated equation as computed by ``faster``, the same function
    computed faster (a test checks the two equal): ``checked`` checks a call by the
    equation's annotations and runs ``faster``; with ``where`` (a test of this
    module), only the calls whose arguments it accepts, the others run the equation.
    The checked function keeps the equation's own body as ``.equation``."""

    def mark(equation: _F) -> _F:
        runs = faster
        if where is not None:
            module, test = sys.modules[__name__], where.__name__
            if getattr(module, test, None) is not where:  # looked up by name below
                raise ValueError(f"where must be a function of {__name__}: {test}")

            def runs(*args, **kwargs):  # type: ignore[no-redef]
                # the test looked up at each call: nt.exercises.use switches it off
                accepts = getattr(module, test)(*args, **kwargs)
                chosen = faster if accepts else equation
                return chosen(*args, **kwargs)

        equation.faster = runs  # type: ignore[attr-defined]
        return equation

    return mark


# --8<-- [start:tables]
def needs_new_table(scores: Tensor) -> bool:
    """Whether a softmax of ``scores`` must make a new table rather than write over
    them: autograd keeps softmax's output, and autocast does not cast a result given
    ``out=``."""
    return _records_gradient(scores) or _autocast(scores.device)


def plus_into(scores: Tensor, *terms: Tensor | None) -> Tensor:
    """``scores`` + each term (a bias $B$, a mask's $M$; None: none), added into
    ``scores``, a fresh product of the caller's, where the term has its dtype and
    shape (the sum's gradient needs neither operand, so autograd allows it); else a
    new table (more batch axes than the scores, or a dtype to promote to)."""
    for term in terms:
        if term is None:
            continue
        if term.dtype == scores.dtype and _fits(scores, term):
            scores.add_(term)
        else:
            scores = scores + term
    return scores


def plus_bias(outputs: Tensor, bias: Tensor | None) -> Tensor:
    """``outputs + bias`` (``outputs`` for a bias of None), written into ``outputs``
    when no gradient is recorded.

    ``outputs`` must be a fresh product (nothing else holds it). Without autograd the
    in-place sum saves a temporary as large as the product: in an inference forward
    these are the largest tensors, and allocating them costs more than adding.
    """
    if bias is None:
        return outputs
    if _records_gradient(outputs, bias):
        return outputs + bias
    return outputs.add_(bias)


# --8<-- [end:tables]


def computes_every_tile(mask: Tensor | None) -> bool:
    """Whether blockwise attention computes every tile for this mask: with none, or
    with one over the keys only (a size-1 query axis), no whole tile is hidden; and
    compiled, it cannot look at a mask tensor to skip tiles."""
    return (
        mask is None
        or mask.ndim < 2
        or mask.shape[-2] == 1
        or torch.compiler.is_compiling()
    )


# --8<-- [start:fused_kernel]
def fused_kernel_computes(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    mask: Tensor | None = None,
    *,
    score_bias: Tensor | None = None,
) -> bool:
    r"""Whether PyTorch's fused kernel (:func:`attention` here) computes this call of
    $\text{Attention}(Q, K, V, M)$ as fast as the equation's cores or faster.

    On the CPU, where ``scaled_dot_product_attention`` is one tiled operation
    (FlashAttention's) that returns zeros, with zero gradients, for a query with no
    allowed key, as the equation does. Without a bias; queries, keys and values of
    one dtype with four axes (batch, heads, positions, features) and one batch, the
    key/value heads dividing the query heads: the shapes its flash kernel takes
    (others materialise the weights). And a mask that hides no whole tile of
    positions (none, or over the keys only, or any mask while compiling: the
    blockwise core skips nothing for them) or the causal rule, which the kernel
    skips itself; another mask (a window) loses to the blockwise core's skipped
    tiles at long lengths, so it runs the equation.
    """
    return (
        score_bias is None
        and queries.device.type == "cpu"
        and queries.ndim == keys.ndim == values.ndim == 4
        and queries.dtype == keys.dtype == values.dtype
        and queries.shape[0] == keys.shape[0] == values.shape[0]
        and keys.shape[1] == values.shape[1]
        and queries.shape[1] % keys.shape[1] == 0
        and min(queries.shape[-2], keys.shape[-2]) > 0
        and (mask is None or mask.ndim <= 4)
        and (computes_every_tile(mask) or is_causal_rule(mask, queries, keys))
    )


@functools.lru_cache(maxsize=2)
def _causal_rule(seq_q: int, seq: int, device: torch.device) -> Tensor:
    """:func:`~named_transformer.core.masks.causal_mask` of these sizes, made once
    (only compared against, never returned)."""
    return causal_mask(seq_q, seq, device=device)


def is_causal_rule(mask: Tensor | None, queries: Tensor, keys: Tensor) -> bool:
    """Whether ``mask`` is ``causal_mask(seq_q, seq)``, the first query at position 0:
    the lower triangle that the kernel's ``is_causal=True`` applies without a mask
    (one comparison of the mask, far cheaper than the attention)."""
    size = (queries.shape[-2], keys.shape[-2])
    return (
        mask is not None
        and mask.shape == size
        and torch.equal(mask, _causal_rule(*size, mask.device))
    )


def attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    mask: Tensor | None = None,
    *,
    score_bias: Tensor | None = None,
) -> Tensor:
    r"""$\text{Attention}(Q, K, V, M)$ by ``scaled_dot_product_attention``, for a call
    that :func:`fused_kernel_computes` accepts (``score_bias`` is then None): a mask
    that hides whole tiles is then the causal rule, passed as ``is_causal=True``."""
    causal = mask is not None and not computes_every_tile(mask)
    if causal:
        mask = None
    elif mask is not None:  # with fewer axes, the kernel materialises the weights
        mask = rearrange(mask, "... -> " + "1 " * (4 - mask.ndim) + "...")
    return F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=mask, is_causal=causal,
        enable_gqa=keys.shape[1] != queries.shape[1],
    )  # fmt: skip


# --8<-- [end:fused_kernel]


# --8<-- [start:softmax]
def _blocked(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """The additive $M$ of ``mask``: 0 where allowed, $-\\infty$ elsewhere (as
    ``additive_mask``, without its check)."""
    blocked = torch.full((), -torch.inf, dtype=dtype, device=mask.device)
    return torch.where(mask, 0.0, blocked)


def softmax(scores: Tensor, mask: Tensor | None = None, beta: float = 1.0) -> Tensor:
    r"""$\nfun{seq}{softmax}(\beta X + M)$, the rows with no allowed key zeros."""
    if beta != 1.0:  # skip a pass over the whole score tensor in the common case
        scores = beta * scores
    return normalise(scores, mask, overwrite=beta != 1.0)  # beta X is a fresh table


def softmax_(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """:func:`softmax`, written over ``scores`` where it can."""
    return normalise(scores, mask, overwrite=True)


def normalise(scores: Tensor, mask: Tensor | None, overwrite: bool) -> Tensor:
    r"""$\nfun{seq}{softmax}(X + M)$; without a gradient, in one table: ``scores``
    where ``overwrite`` allows, else the fresh $X + M$."""
    new_table = needs_new_table(scores)
    if mask is None:
        reuse = overwrite and not new_table
        return torch.softmax(scores, dim=-1, out=scores if reuse else None)
    # the row has a key to attend (reduce(mask, "... seq -> ... 1", "any"), without
    # einops' dispatch, which costs more than the reduction on a mask this small)
    alive = mask.any(dim=-1, keepdim=True)
    blocked = _blocked(mask | ~alive, scores.dtype)  # an empty row: M = 0
    into = overwrite and not new_table  # else X + M is the fresh table
    masked = plus_into(scores, blocked) if into else scores + blocked
    return softmax_of_alive_rows(masked, alive, new_table)


def softmax_of_alive_rows(scores: Tensor, alive: Tensor, new_table: bool) -> Tensor:
    r"""$\nfun{seq}{softmax}(X) \odot$ ``alive``, the weights over ``scores`` (a fresh
    table) unless ``new_table``: the rows with no key to attend become zeros (their
    scores must be finite)."""
    if new_table:
        return torch.softmax(scores, dim=-1) * alive
    return torch.softmax(scores, dim=-1, out=scores).mul_(alive)


def biased_softmax(biased: Tensor, mask: Tensor | None, overwrite: bool) -> Tensor:
    r"""$\nfun{seq}{softmax}(S + B + M)$ from the biased scores $S + B$: $M$ is added
    into them where ``overwrite`` allows (a fresh table no one else holds), and the
    weights go over them too when no gradient is recorded."""
    if biased.shape[-1] == 0:  # no key at all: nothing to normalise
        return softmax(biased)
    if not overwrite:  # a table another holds (a recording's, an edit): a copy
        biased = biased.clone()
    blocked = None if mask is None else _blocked(mask, biased.dtype)
    biased = plus_into(biased, blocked)
    # B may hold -inf too: a row is empty when B + M hides every key, which only its
    # maximum shows (a NaN row stays alive, and NaN); its scores become 0, its weights 0
    alive = reduce(biased, "... seq_q seq -> ... seq_q 1", "max") != -torch.inf
    biased = biased.masked_fill_(~alive, 0.0)
    return softmax_of_alive_rows(biased, alive, needs_new_table(biased))


def attention_weights(
    queries: Tensor,
    keys: Tensor,
    mask: Tensor | None = None,
    *,
    score_bias: Tensor | None = None,
) -> Tensor:
    r"""$\nfun{seq}{softmax}(Q \ndot{key} K / \sqrt{|\mathsf{key}|} + B + M)$, the
    weights written over the scores, a fresh table."""
    scores = scaled_dot_score(queries, keys)
    if score_bias is None:
        return softmax_(scores, mask)
    return biased_softmax(plus_into(scores, score_bias), mask, overwrite=True)


# --8<-- [end:softmax]


# --8<-- [start:standardize]
def standardize(inputs: Tensor, eps: float = 1e-5) -> Tensor:
    r"""$\nfun{layer}{standardize}(X)$: with a gradient, :class:`Standardize`, whose
    backward pass is written out; without one, PyTorch's fused ``layer_norm`` without
    its $\gamma$ and $\beta$, the same $\hat X$ in one pass over $X$ where the
    arithmetic takes five (on one token each costs more than its sums)."""
    if _records_gradient(inputs):
        return Standardize.apply(inputs, eps)
    return F.layer_norm(inputs, inputs.shape[-1:], eps=eps)


def mean_over_layer(inputs: Tensor) -> Tensor:
    r"""$\nfun{layer}{mean} X$, kept as an axis of size 1 to broadcast against $X$."""
    # einops's reduce("... layer -> ... 1", "mean") makes this same call, with pattern
    # handling around it that costs about a third of a layer norm on one token
    return inputs.mean(dim=-1, keepdim=True)  # allow-raw: layer is the last axis


def standardized(inputs: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    r"""$\hat X$ and $1/\sigma$, which the gradient needs."""
    # var_layer and mean_layer in one pass over X (biased: correction=0)
    variance, mean = torch.var_mean(  # allow-raw: layer is the last axis
        inputs, dim=-1, keepdim=True, correction=0
    )
    inverse_sigma = (variance + eps).rsqrt()
    return (inputs - mean) * inverse_sigma, inverse_sigma


class Standardize(torch.autograd.Function):
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
        normalised, inverse_sigma = standardized(inputs, eps)
        ctx.save_for_backward(normalised, inverse_sigma)
        return normalised

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        normalised, inverse_sigma = ctx.saved_tensors
        mean_grad = mean_over_layer(grad)
        mean_projection = mean_over_layer(grad * normalised)
        centred_grad = torch.addcmul(
            grad - mean_grad, normalised, mean_projection, value=-1.0
        )
        return centred_grad * inverse_sigma, None


# --8<-- [end:standardize]


# --8<-- [start:relu]
def relu(inputs: Tensor) -> Tensor:
    r"""$\max(X, 0)$: eager, ``torch.relu``, whose backward pass is one fused kernel;
    under ``torch.compile``, :class:`ReLU`, its gradient written from the output."""
    if torch.compiler.is_compiling():
        return ReLU.apply(inputs)
    return torch.relu(inputs)


class ReLU(torch.autograd.Function):
    r"""ReLU with its gradient written from the output
    $Y = \operatorname{relu}(X) \ge 0$, for $G = \partial L / \partial Y$:

    $$\frac{\partial L}{\partial X} = G \odot \operatorname{sign}(Y),$$

    1 where the unit fired, 0 where it did not: the same numbers as PyTorch's backward
    pass, which selects $G$ where $X > 0$. Compiled, PyTorch's form makes the compiler
    keep that comparison as a boolean mask for the backward pass, and its CPU code
    stores and loads boolean tensors slowly. Written from $Y$, which the backward pass
    of $W^2$ keeps anyway, the gradient needs no mask.
    """

    @staticmethod
    def forward(ctx, inputs: Tensor) -> Tensor:
        outputs = torch.relu(inputs)
        ctx.save_for_backward(outputs)
        return outputs

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (outputs,) = ctx.saved_tensors
        return grad * outputs.sign()


# --8<-- [end:relu]
