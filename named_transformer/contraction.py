r"""The library's ``einsum``: einops' pattern, with the contraction's plan remembered.

Every contraction in the package is written as einops writes it,
``einsum(queries, keys, "... seq_q key, ... seq key -> ... seq_q seq")``, and this is
the function those lines call. It returns what ``einops.einsum`` returns (a test checks
values and gradients on random patterns), but does less work on each call:
``torch.einsum`` reads the equation, then permutes and reshapes both operands around
one batched matrix product, every time. Here the pattern of two operands is read once
per pattern and number of dimensions: which axes are batch axes (in both operands and
the output), which are contracted (in both, not the output) and which belong to one
operand. Each call then makes the one ``torch.matmul`` with only the moves the layout
needs (a projection by a weight stored (free, contracted), ``hidden layer``, is one
``F.linear``, which reads it as it lies). On one token (a cached decoding step, the
Performance page's table 17) that saves several microseconds a contraction, a fair
share of a small product's time (the Performance page times one).

Anything else goes to ``einops.einsum`` unchanged: three or more operands, an axis
summed away from one operand alone, a repeated axis (a diagonal), a contracted axis of
size 1 that broadcasts against a longer one (or sizes that do not fit: einops then
raises its own error), and every call while
``torch.compile``, ``torch.export`` or a JIT trace records the graph (the compiler reads
``torch.einsum`` better than it reads the moves spelled out; dynamo records the
``einops.einsum`` call as one node, :mod:`named_transformer._tracing`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import einops
import torch
import torch.nn.functional as F
from torch import Tensor

from named_transformer.axes import _autocast, _broadcast, _records_gradient

__all__ = ["einsum"]


# --8<-- [start:einsum]
def einsum(*tensors_and_pattern, out=None):
    """``einops.einsum(*tensors, pattern)``: the same arguments and result.

    Its operands' shapes are checked by the named equation that calls it, as they are
    for einops. ``out``: a table of exactly the result's shape and dtype to write it
    into, returned (as PyTorch's ``out=``, it records no gradient). A loop of products
    of one shape can then reuse one table instead of taking fresh memory each time.
    Under autocast the product is the autocast one, copied into ``out``.
    """
    into = None
    if out is not None:
        if _records_gradient(*tensors_and_pattern[:-1]):
            raise RuntimeError(
                "einsum(..., out=table) records no gradient, and an operand requires "
                "one: call it without out"
            )
        into = None if _autocast(out.device) else out
    if len(tensors_and_pattern) == 3 and not _recording_a_graph():
        first, second, pattern = tensors_and_pattern
        plan = _plan(pattern, first.ndim, second.ndim)
        if plan is not None:
            try:
                result = plan(first, second, into)
            except RuntimeError:  # sizes one product cannot pair: a size-1 axis
                pass  # summed against a longer one broadcasts in einops, or an error
            else:
                return result if out is None else _into(out, result)
    return _into(out, einops.einsum(*tensors_and_pattern))


def _into(out: Tensor | None, result: Tensor) -> Tensor:
    """``result``, copied into ``out`` if one is given and the product is not already
    there; one line if ``out`` does not fit it."""
    if out is None:
        return result
    if out.shape != result.shape or out.dtype != result.dtype:
        raise ValueError(
            f"einsum's out is a {tuple(out.shape)} table of {out.dtype}, but the "
            f"result is {tuple(result.shape)} of {result.dtype}"
        )
    return result if result is out else out.copy_(result)


def _recording_a_graph() -> bool:
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


# --8<-- [end:einsum]


# --8<-- [start:plan]
@dataclass(frozen=True)
class _Plan:
    """One contraction as ``torch.matmul``: the first operand laid out as
    (batch…, free, contracted), the second as (batch…, contracted, free), and
    the product (batch…, first's free, second's free) moved to the output's
    order. A projection by a matrix laid out (free, contracted), a weight
    ``hidden layer``, is ``linear``: PyTorch's ``F.linear`` reads the matrix as it
    lies, with less work around the product than a transposed view and ``matmul``.

    ``batch``, ``first_free``, ``contracted`` and ``second_free`` count axes; the
    permutations are None where the layout already fits. The last ``lifted`` batch
    axes are the second operand's alone (heads in ``heads layer key``): the first
    gets size-1 axes there, which the product broadcasts, so that the second is read
    as it lies instead of copied into (contracted, free) order. That makes one narrow
    product per lifted entry instead of one wide one: worth it while the second
    operand, which would be copied, is the larger, and while no gradient is recorded
    (the first operand's would be summed over the broadcast); else ``unlifted`` takes
    the call.
    """

    batch: int
    first_free: int
    contracted: int
    second_free: int
    first_order: tuple[int, ...] | None
    second_order: tuple[int, ...] | None
    output_order: tuple[int, ...] | None
    lifted: int = 0
    unlifted: _Plan | None = None
    linear: bool = False

    def __call__(
        self, first: Tensor, second: Tensor, out: Tensor | None = None
    ) -> Tensor:
        if self.unlifted is not None and (
            first.numel() >= second.numel() or _records_gradient(first, second)
        ):  # many rows, or a backward pass, which would sum over the broadcast
            return self.unlifted(first, second, out)
        if self.first_order is not None:
            first = first.permute(self.first_order)  # allow-raw: the plan's layout
        if self.linear:  # a weight (free, contracted), as PyTorch's linear reads it
            return F.linear(first, second)  # allow-raw: the one contraction
        if self.second_order is not None:
            second = second.permute(self.second_order)  # allow-raw: the plan's layout
        batch, free, contracted = self.batch, self.first_free, self.contracted
        if self.lifted:  # size 1 where the second operand's lifted axes are
            shape = first.shape
            first = first.reshape(  # allow-raw: the plan's layout (a view)
                (*shape[: batch - self.lifted], *[1] * self.lifted,
                 *shape[batch - self.lifted :])
            )  # fmt: skip
        if contracted > 1 and (
            first.shape[batch + free :] != second.shape[batch : batch + contracted]
        ):  # merged, unequal axes could pair up wrongly with an equal product
            raise RuntimeError("contracted axes differ in size")
        # the product is the result, and can be written into ``out``, when no axes
        # are merged or moved after it
        final = out if self.output_order is None else None
        if batch == 0 and contracted == 1 and self.second_free == 1:
            # a projection: matmul takes the first operand's leading axes as rows
            product = torch.matmul(  # allow-raw: the one contraction
                first, second, out=_product_table(final, first, second)
            )
        else:  # the free and the contracted axes merged into one each (or size 1)
            first_free = first.shape[batch : batch + free]
            second_free = second.shape[batch + contracted :]
            if free != 1 or contracted != 1:
                merged = (math.prod(first_free), math.prod(first.shape[batch + free :]))
                first = first.reshape(  # allow-raw: the plan's layout
                    (*first.shape[:batch], *merged)
                )
            if self.second_free != 1 or contracted != 1:
                merged = (math.prod(second.shape[batch:batch + contracted]),
                          math.prod(second_free))  # fmt: skip
                second = second.reshape(  # allow-raw: the plan's layout
                    (*second.shape[:batch], *merged)
                )
            as_is = free == 1 and self.second_free == 1  # no reshape after
            table = _product_table(final, first, second) if as_is else None
            product = torch.matmul(  # allow-raw: the one contraction
                first, second, out=table
            )
            if not as_is:
                product = product.reshape(  # allow-raw: the plan's layout
                    (*product.shape[:batch], *first_free, *second_free)
                )
        if self.output_order is None:
            return product
        return product.permute(self.output_order)  # allow-raw: the plan's layout


# --8<-- [end:plan]


def _product_table(out: Tensor | None, first: Tensor, second: Tensor) -> Tensor | None:
    """``out`` if it has the shape of ``matmul(first, second)``, which then writes its
    product there; else None (a fresh product: matmul would resize ``out``, and
    ``einsum`` refuses the table in one line)."""
    if out is None or first.ndim < 2 or second.ndim < 2:  # matmul reshapes a vector
        return None
    batch = _broadcast(first.shape[:-2], second.shape[:-2])
    shape = (*batch, first.shape[-2], second.shape[-1]) if batch is not None else None
    return out if out.shape == shape else None


def _axes(side: str, ndim: int) -> list[str] | None:
    """The axis names of one side of a pattern, ``...`` spelled out as one name per
    dimension, counted from the right (as einsum aligns them); None for what the plan
    does not cover (compositions, anonymous axes, a rank that does not fit)."""
    names = side.split()
    if any(not name.isidentifier() for name in names if name != "..."):
        return None
    if "..." in names:
        at = names.index("...")
        count = ndim - (len(names) - 1)
        if count < 0:
            return None
        spelled = [f"...{count - 1 - i}" for i in range(count)]
        names = names[:at] + spelled + names[at + 1 :]
    return names if len(names) == ndim else None


@functools.lru_cache(maxsize=4096)
def _plan(pattern: str, first_ndim: int, second_ndim: int) -> _Plan | None:
    """The plan of a two-operand pattern, or None where einops should take the call."""
    inputs, arrow, output = pattern.partition("->")
    sides = inputs.split(",")
    if not arrow or len(sides) != 2:
        return None
    first, second = _axes(sides[0], first_ndim), _axes(sides[1], second_ndim)
    if first is None or second is None:
        return None
    if len(set(first)) < len(first) or len(set(second)) < len(second):
        return None  # a diagonal
    dots = max(sum(n.startswith("...") for n in side) for side in (first, second))
    named = output.split()
    out = _axes(output, len(named) - 1 + dots if "..." in named else len(named))
    if out is None or len(set(out)) < len(out):
        return None
    if any(n not in first and n not in second for n in out):
        return None
    if any(n not in out and not (n in first and n in second) for n in first + second):
        return None  # an axis summed within one operand
    batch = [n for n in out if n in first and n in second]
    first_free = [n for n in out if n in first and n not in second]
    second_free = [n for n in out if n in second and n not in first]
    contracted = [n for n in first if n in second and n not in out]
    plan = _laid_out(first, second, out, batch, first_free, contracted, second_free)
    if (
        not batch and len(contracted) == len(second_free) == 1
        and plan.second_order == (1, 0) and plan.output_order is None
    ):  # fmt: skip
        return replace(plan, linear=True)
    lifted = _lifted(second, second_free, contracted)
    if not lifted:
        return plan
    second_free = [n for n in second_free if n not in lifted]
    lifting = _laid_out(
        first, second, out, batch + lifted, first_free, contracted, second_free,
        lifted=len(lifted), unlifted=plan,
    )  # fmt: skip
    return plan if lifting.second_order is not None else lifting  # it would copy


def _laid_out(
    first: list[str], second: list[str], out: list[str], batch: list[str],
    first_free: list[str], contracted: list[str], second_free: list[str],
    lifted: int = 0, unlifted: _Plan | None = None,
) -> _Plan:  # fmt: skip
    """The plan with the operands' axes in these roles (the last ``lifted`` batch
    axes are the second operand's alone)."""
    first_layout = batch[: len(batch) - lifted] + first_free + contracted
    second_layout = batch + contracted + second_free
    product_layout = batch + first_free + second_free

    def order(names: list[str], layout: list[str]) -> tuple[int, ...] | None:
        indices = tuple(names.index(n) for n in layout)
        return None if indices == tuple(range(len(indices))) else indices

    return _Plan(
        len(batch), len(first_free), len(contracted), len(second_free),
        order(first, first_layout), order(second, second_layout),
        order(product_layout, out), lifted, unlifted,
    )  # fmt: skip


def _lifted(second: list[str], free: list[str], contracted: list[str]) -> list[str]:
    """The second operand's free axes that lead it, before its contracted axes, when
    free axes follow those too (``heads layer key``): moved behind the contracted
    axes they would have to be copied; as batch axes they stay where they lie. (With
    no free axis after, ``hidden layer``, the matrix product reads the transpose as
    it lies.)"""
    leading = []
    for name in second:
        if name not in free:
            break
        leading.append(name)
    after = second[len(leading) :]
    if not leading or not contracted or not any(n in free for n in after):
        return []
    if after[: len(contracted)] != contracted:
        return []  # batch axes or a different order after them: the plan as it was
    return leading
