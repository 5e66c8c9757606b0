r"""Blockwise attention with an online softmax (FlashAttention), in named notation.

:func:`~named_transformer.core.attention.attention` materialises the weights
$A \in \mathbb R^{\mathsf{seq'} \times \mathsf{seq}}$: memory grows with the square of
the length. FlashAttention (Dao et al., 2022; Milakov & Gimelshein's *online softmax*,
2018) computes the same $\text{Attention}(Q, K, V, M, B)$ one block of keys at a time,
keeping only three running statistics per query: a maximum
$m \in \mathbb R^{\mathsf{seq'}}$, a normaliser $\ell \in \mathbb R^{\mathsf{seq'}}$ and
an unnormalised output $O \in \mathbb R^{\mathsf{seq'} \times \mathsf{val}}$.

For the key block $b$ (positions $\mathsf{seq}_b \subset \mathsf{seq}$, with $K_b$,
$V_b$, $B_b$, $M_b$ the slices of keys, values, bias and mask):

$$S_b = \frac{Q \ndot{key} K_b}{\sqrt{|\mathsf{key}|}} + B_b + M_b
  \in \mathbb R^{\mathsf{seq'} \times \mathsf{seq}_b},$$

$$m' = \max\left(m, \nfun{seq}{max} S_b\right), \qquad
  P_b = \exp(S_b - m'),$$

$$\ell' = e^{m - m'} \ell + \sum_{\mathsf{seq}} P_b, \qquad
  O' = e^{m - m'} O + P_b \ndot{seq} V_b,$$

starting from $m = -\infty$, $\ell = 0$, $O = 0$; after the last block
$\text{Attention}(Q, K, V, M, B) = O / \ell$.

**Why the rescaling is exact.** After the blocks seen so far, let $m$ be the largest
score of a query and $\ell = \sum_i e^{s_i - m}$, $O = \sum_i e^{s_i - m} v_i$ over the
keys $i$ seen. When the next block raises the maximum to $m'$, every old term needs
$e^{s_i - m'} = e^{s_i - m}\, e^{m - m'}$: one factor $e^{m - m'}$ per query, the same
for all its old keys, so $\ell$ and $O$ are rescaled whole, and the new block's terms
are added with the new maximum. By induction, after the last block $m = \max_i s_i$,
$\ell = \sum_i e^{s_i - m}$ and $O = \sum_i e^{s_i - m} v_i$, so

$$\frac{O}{\ell} = \sum_i \frac{e^{s_i - m}}{\sum_{i'} e^{s_{i'} - m}}\, v_i
  = \sum_i \nfun{seq}{softmax}(s)_i\, v_i :$$

the common factor $e^{-m}$ cancels, exactly as in the one-pass softmax, and no term
overflows: every exponent $s_i - m$ and $m - m'$ is $\le 0$. Only the order of the
floating-point sums differs from the materialising path.

**The backward pass** (FlashAttention's) recomputes each block instead of storing the
weights. With the saved $m$ and $\ell$, $P_b = \exp(S_b - m) / \ell$ is the block of the
weights $A$; with $D = \sum_{\mathsf{val}} \partial O \odot \text{Attention}$ (the
softmax's $\sum_{\mathsf{seq}} A \odot \partial A$, computed from the output),

$$\partial V_b = P_b \ndot{seq'} \partial O, \quad
  \partial S_b = P_b \odot \left(\partial O \ndot{val} V_b - D\right), \quad
  \partial B_b = \partial S_b,$$

$$\partial Q \mathrel{+}= \frac{\partial S_b \ndot{seq} K_b}{\sqrt{|\mathsf{key}|}},
  \qquad
  \partial K_b = \frac{\partial S_b \ndot{seq'} Q}{\sqrt{|\mathsf{key}|}}.$$

Memory: a block of scores, $|\mathsf{seq'}_b| \cdot |\mathsf{seq}_b|$ numbers per
batch entry and head, instead of $|\mathsf{seq'}| \cdot |\mathsf{seq}|$. Queries are
cut into blocks of the same size, so a block of scores stays small however long the
sequence, and each query block keeps its own $m$, $\ell$, $O$.

**Skipping blocks.** A block of keys that the mask hides from a whole block of queries
adds nothing ($P_b = 0$, $e^{m - m'} = 1$), so it is skipped. Under a causal mask that
is about half of them. Two ways to know:

- ``causal=True`` (with ``offset``, the position of the first query, as in
  :func:`~named_transformer.core.masks.causal_mask`) decides by index arithmetic: the
  same blocks are skipped eagerly and under ``torch.compile(fullgraph=True)``.
- A boolean tensor ``mask`` is looked at block by block with ``.any()`` when running
  eagerly (on a GPU, each look waits for the device). That is data-dependent control
  flow, which ``torch.compile(fullgraph=True)`` cannot trace: compiled, every block is
  computed (the mask still applies, the result is the same, only the skipping is
  lost). Pass ``causal=True`` to skip under the compiler.

Both may be given: the mask then also hides what the causal rule allows. A query with
no allowed key gets zeros (and zero gradients), never NaN, as in
:func:`~named_transformer.core.attention.attention`.

**Dropout** (``dropout``, ``training``) drops entries of $P_b$ in
$P_b \ndot{seq} V_b$ but not in $\ell$: since dropout multiplies entry by entry,
$\text{Dropout}(P/\ell) \ndot{seq} V = (\text{Dropout}(P) \ndot{seq} V) / \ell$,
the same function as dropping the normalised weights (other random draws). Its
gradients flow by autograd through the blocks, which keeps every block's weights for
the backward pass: the memory saving is then the forward pass's only. Without dropout
the gradients come from the recomputing backward pass above.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple

import torch
from einops import reduce
from jaxtyping import Bool, Float
from torch import Tensor

from named_transformer.axes import (
    _autocast,
    _broadcast,
    _fits,
    _records_gradient,
    checked,
)
from named_transformer.contraction import _recording_a_graph, einsum
from named_transformer.core.dropout import dropout as drop
from named_transformer.core.fast import computes_every_tile, plus_into
from named_transformer.core.masks import additive_mask, causal_mask

__all__ = [
    "AUTOMATIC_RULE",
    "BLOCK",
    "CROSSOVER",
    "GPU_BLOCK",
    "GPU_CROSSOVER",
    "FULL_CROSSOVER",
    "AutomaticRule",
    "automatic_block",
    "block_size",
    "check_block",
    "blockwise_attention",
]


# --8<-- [start:tile_scores]
@checked
def _tile_scores(
    queries: Float[Tensor, "*batch seq_q key"],
    keys: Float[Tensor, "*#batch seq key"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None,
    into: Float[Tensor, "*batch seq_q seq"] | None = None,
) -> Float[Tensor, "*batch seq_q seq"]:
    r"""$S_b = \hat Q \ndot{key} K_b + B_b + M_b$ for one block of queries and keys.

    ``queries`` are scaled already, $\hat Q_b = Q_b / \sqrt{|\mathsf{key}|}$: once
    per block of queries, not once per block of scores. The boolean ``mask`` is
    added as $M_b \in \{0, -\infty\}$
    (:func:`~named_transformer.core.masks.additive_mask`), as the equation writes it.
    ``into``: a table to write $S_b$ into (:class:`_Tables`), else a fresh one.
    """
    scores = einsum(
        queries, keys, "... seq_q key, ... seq key -> ... seq_q seq", out=into
    )
    blocked = None if mask is None else additive_mask(mask, scores.dtype)
    return plus_into(scores, score_bias, blocked)  # into the product's table


def _batch_axes(*tables: Tensor | None) -> tuple[int, ...]:
    """The batch axes (all but the last two) that the tables broadcast to."""
    batch: tuple[int, ...] | None = ()
    for table in (t for t in tables if t is not None):
        batch = _broadcast(batch, table.shape[:-2])
        if batch is None:  # only with the shape checks off
            shapes = ", ".join(str(tuple(t.shape)) for t in tables if t is not None)
            raise ValueError(f"the batch axes of {shapes} do not broadcast")
    return batch


class _Tables:
    """One table of scores per tile shape and kind, written over tile after tile,
    when no gradient is recorded (autograd would keep each tile's), nothing is being
    compiled (the compiler plans the memory) and autocast is off (it would not cast a
    product written into a table); else none (``scores`` and ``gradients`` give None:
    a fresh table each tile). The tables are those of the queries' dtype and device;
    a tile's scores have the batch axes of the queries and keys.

    A fresh product takes fresh memory: on the CPU, blocks of 256 with no mask ran in
    about 1.7x SDPA's time at 1,024 positions with a fresh table a tile, and 1.3x
    with one reused (the blockwise page). The tables live for one call: at most four
    shapes (the last block of queries or keys may be shorter) of each kind."""

    def __init__(self, queries: Tensor, keys: Tensor, *others: Tensor | None) -> None:
        self.like, self.batch = queries, _batch_axes(queries, keys)
        fresh = (
            _records_gradient(queries, keys, *others)
            or _recording_a_graph()
            or _autocast(queries.device)
        )
        self.tables: dict[tuple, Tensor] | None = None if fresh else {}

    def scores(self, rows: slice, columns: slice) -> Tensor | None:
        """The table for the scores of the tile of these queries and keys (None: take
        a fresh one)."""
        return self._table("scores", self.batch, rows, columns)

    def gradients(
        self, rows: slice, columns: slice, batch: tuple[int, ...]
    ) -> Tensor | None:
        r"""The backward pass's table for the tile's $\partial S_b$, with ``batch``'s
        axes (those of $\partial O$), apart from the scores' even where the shapes
        agree: both are read at once."""
        return self._table("gradients", batch, rows, columns)

    def _table(
        self, kind: str, batch: tuple[int, ...], rows: slice, columns: slice
    ) -> Tensor | None:
        if self.tables is None:
            return None
        key = (kind, *batch, rows.stop - rows.start, columns.stop - columns.start)
        if key not in self.tables:
            self.tables[key] = self.like.new_empty(key[1:])
        return self.tables[key]


# --8<-- [end:tile_scores]


# --8<-- [start:online_softmax]
_LOG2_E = 1.0 / math.log(2.0)


def _exp(exponents: Tensor) -> Tensor:
    """$e^x = 2^{x \\log_2 e}$: PyTorch's ``exp2`` is several times faster than its
    ``exp`` on the CPU, and one multiplication is cheap beside the difference."""
    return torch.exp2(exponents * _LOG2_E)


def _exp_shifted(scores: Tensor, shift: Tensor) -> Tensor:
    """$e^{S - m}$, written over $S$ when no gradient is recorded (every forward pass
    but dropout's, and the backward pass): a block's table is then allocated once, not
    once for each of the subtraction, the scaling and the exponential (fresh tables
    of a megabyte can cost the CPU page faults, block after block)."""
    if _records_gradient(scores) or not _fits(scores, shift):
        return _exp(scores - shift)
    return torch.exp2(scores.sub_(shift).mul_(_LOG2_E), out=scores)


def _finite(maximum: Tensor) -> Tensor:
    """$m$ with $-\\infty$ (no allowed key yet) raised to the dtype's most negative
    number: then $e^{S - m}$ is $e^{-\\infty} = 0$, not $e^{-\\infty + \\infty}$ =
    NaN. A finite $m$ is unchanged."""
    return maximum.clamp_min(torch.finfo(maximum.dtype).min)


@checked
def _online_softmax(
    scores: Float[Tensor, "*batch seq_q seq"],
    values: Float[Tensor, "*#batch seq val"],
    maximum: Float[Tensor, "*batch seq_q 1"],
    normaliser: Float[Tensor, "*batch seq_q 1"],
    outputs: Float[Tensor, "*batch seq_q val"],
    dropout: float = 0.0,
    training: bool = False,
) -> tuple[
    Float[Tensor, "*batch seq_q 1"],
    Float[Tensor, "*batch seq_q 1"],
    Float[Tensor, "*batch seq_q val"],
]:
    r"""One block of keys: $m' = \max(m, \nfun{seq}{max} S_b)$,
    $P_b = e^{S_b - m'}$, $\ell' = e^{m - m'}\ell + \sum_{\mathsf{seq}} P_b$,
    $O' = e^{m - m'} O + P_b \ndot{seq} V_b$.

    $m$ and $\ell$ keep a size-1 $\mathsf{seq}$ axis: they broadcast over the block's
    keys as they are.
    """
    new_maximum = torch.maximum(
        maximum, reduce(scores, "... seq_q seq -> ... seq_q 1", "max")
    )
    finite = _finite(new_maximum)
    rescale = _exp(maximum - finite)  # e^{m - m'} <= 1; 0 while m = -inf
    weights = _exp_shifted(scores, finite)  # S_b is not needed after this
    normaliser = rescale * normaliser + reduce(
        weights, "... seq_q seq -> ... seq_q 1", "sum"
    )
    new_outputs = einsum(
        drop(weights, dropout, training),
        values,
        "... seq_q seq, ... seq val -> ... seq_q val",
    )
    outputs = new_outputs.addcmul_(rescale, outputs)  # e^{m - m'} O + P_b V_b
    return new_maximum, normaliser, outputs


# --8<-- [end:online_softmax]


# --8<-- [start:normalise]
@checked
def _normalise(
    outputs: Float[Tensor, "*batch seq_q val"],
    normaliser: Float[Tensor, "*batch seq_q 1"],
) -> Float[Tensor, "*batch seq_q val"]:
    r"""$O / \ell$; a query with no allowed key ($\ell = 0$, $O = 0$) gets zeros."""
    return outputs / normaliser.masked_fill(normaliser == 0, 1.0)


# --8<-- [end:normalise]


def _block_of(table: Tensor | None, queries: slice, keys: slice) -> Tensor | None:
    """The block of a mask or bias; an axis of size 1 broadcasts, so it stays whole."""
    if table is None:
        return None
    rows = queries if table.shape[-2] != 1 else slice(None)
    columns = keys if table.shape[-1] != 1 else slice(None)
    return table[..., rows, columns]


class Tiling(NamedTuple):
    """How the blocks are cut and which are skipped: ``block`` positions a block, the
    causal rule (first query at ``offset``) or none."""

    block: int
    causal: bool = False
    offset: int = 0


# --8<-- [start:blocks]
def _query_blocks(seq_q: int, block: int) -> Iterator[slice]:
    """Consecutive blocks of ``block`` query positions (the last may be shorter)."""
    for start in range(0, seq_q, block):
        yield slice(start, min(start + block, seq_q))


def _key_blocks(
    queries: slice,
    seq: int,
    block: int,
    mask: Tensor | None,
    causal: bool,
    offset: int,
    device: torch.device,
) -> Iterator[tuple[slice, Tensor | None]]:
    """The blocks of keys a block of queries may attend, each with its mask (None: the
    whole block is allowed).

    ``causal``: query $j$ (absolute position ``offset`` + $j$) sees keys $i \\le$
    ``offset`` + $j$, so the keys after the last query's position are never visited,
    and only blocks that cross the diagonal need a mask. A tensor ``mask`` is looked
    at only when running eagerly (``.any()`` is data-dependent control flow).
    """
    look = (
        mask is not None
        and not torch.compiler.is_compiling()
        and mask.device.type != "meta"  # shapes only: nothing to look at
    )
    stop = max(0, min(seq, offset + queries.stop)) if causal else seq
    for start in range(0, stop, block):
        keys = slice(start, min(start + block, stop))
        allowed = _block_of(mask, queries, keys)
        if causal and keys.stop - 1 > offset + queries.start:  # crosses the diagonal
            rule = causal_mask(
                queries.stop - queries.start, keys.stop - keys.start,
                offset=offset + queries.start - keys.start, device=device,
            )  # fmt: skip
            allowed = rule if allowed is None else allowed & rule
        if look and allowed is not None:
            if not allowed.any():  # hidden from every query of the block: skip it
                continue
            if allowed.all():  # nothing hidden: no mask to apply
                allowed = None
        yield keys, allowed


def _score_tiles(
    scaled: Tensor,
    keys: Tensor,
    rows: slice,
    mask: Tensor | None,
    score_bias: Tensor | None,
    tiling: Tiling,
    tables: _Tables,
) -> Iterator[tuple[slice, Tensor]]:
    """The blocks of keys that the block ``rows`` of queries (scaled, $\\hat Q_b$)
    visits, each with its scores $S_b$: the tiles both passes go through."""
    block, causal, offset = tiling
    for columns, allowed in _key_blocks(
        rows, keys.shape[-2], block, mask, causal, offset, scaled.device
    ):
        yield columns, _tile_scores(
            scaled, keys[..., columns, :], allowed,
            _block_of(score_bias, rows, columns),
            tables.scores(rows, columns),
        )  # fmt: skip


# --8<-- [end:blocks]


# --8<-- [start:blockwise_forward]
def _blockwise_forward(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    mask: Tensor | None,
    score_bias: Tensor | None,
    tiling: Tiling,
    dropout: float = 0.0,
    training: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""$O / \ell$ block by block, with the final $m$ and $\ell$ (for the backward
    pass)."""
    seq_q = queries.shape[-2]
    batch = _batch_axes(queries, keys, values, mask, score_bias)
    attended = queries.new_empty(*batch, seq_q, values.shape[-1])
    maximum = queries.new_empty(*batch, seq_q, 1)
    normaliser = queries.new_empty(*batch, seq_q, 1)
    scale = 1.0 / math.sqrt(queries.shape[-1])
    tables = _Tables(queries, keys, values, score_bias)
    for rows in _query_blocks(seq_q, tiling.block):
        scaled = queries[..., rows, :] * scale  # \hat Q_b, once per block of queries
        size = rows.stop - rows.start
        # m = -inf, l = 0, O = 0: fresh tensors, as autograd may keep them
        m = queries.new_full((*batch, size, 1), -torch.inf)
        ell = queries.new_zeros(*batch, size, 1)
        outputs = queries.new_zeros(*batch, size, values.shape[-1])
        for columns, scores in _score_tiles(
            scaled, keys, rows, mask, score_bias, tiling, tables
        ):
            m, ell, outputs = _online_softmax(
                scores, values[..., columns, :], m, ell, outputs, dropout, training
            )
        attended[..., rows, :] = _normalise(outputs, ell)
        maximum[..., rows, :], normaliser[..., rows, :] = m, ell
    return attended, maximum, normaliser


# --8<-- [end:blockwise_forward]


# --8<-- [start:tile_gradients]
@checked
def _tile_gradients(
    scores: Float[Tensor, "*batch seq_q seq"],
    queries: Float[Tensor, "*batch seq_q key"],
    keys: Float[Tensor, "*#batch seq key"],
    values: Float[Tensor, "*#batch seq val"],
    grad_outputs: Float[Tensor, "*batch seq_q val"],
    maximum: Float[Tensor, "*batch seq_q 1"],
    inverse: Float[Tensor, "*batch seq_q 1"],
    delta: Float[Tensor, "*batch seq_q 1"],
    into: Float[Tensor, "*batch seq_q seq"] | None = None,
) -> tuple[
    Float[Tensor, "*batch seq_q seq"],
    Float[Tensor, "*batch seq_q key"],
    Float[Tensor, "*batch seq key"],
    Float[Tensor, "*batch seq val"],
]:
    r"""One block's share of the gradients: $\partial S_b$, and the terms of
    $\partial \hat Q$, $\partial K_b$, $\partial V_b$.

    $P_b = e^{S_b - m} / \ell$ recomputes the weights (``inverse`` is $1/\ell$, 0 for a
    query with no allowed key); ``delta`` is $D$. As in the forward pass,
    $e^{S_b - m}$ is written over $S_b$ where the shapes allow. ``into``: a table
    (:class:`_Tables`) for $\partial P_b$, then $\partial S_b$ over it; with it, the
    division by $\ell$ is written over $S_b$'s table as well (where the shapes
    allow). No gradient is recorded in a backward pass.
    """
    weights = _exp_shifted(scores, maximum)  # over S_b, as in the forward
    in_place = into is not None and _fits(weights, inverse)
    weights = weights.mul_(inverse) if in_place else weights * inverse
    grad_values = einsum(
        weights, grad_outputs, "... seq_q seq, ... seq_q val -> ... seq val"
    )
    grad_weights = einsum(
        grad_outputs, values, "... seq_q val, ... seq val -> ... seq_q seq", out=into
    )
    if into is not None:  # dS = P * (dP - D), over dP
        grad_scores = grad_weights.sub_(delta).mul_(weights)
    else:
        grad_scores = weights * (grad_weights - delta)
    grad_queries = einsum(
        grad_scores, keys, "... seq_q seq, ... seq key -> ... seq_q key"
    )
    grad_keys = einsum(
        grad_scores, queries, "... seq_q seq, ... seq_q key -> ... seq key"
    )
    return grad_scores, grad_queries, grad_keys, grad_values


# --8<-- [end:tile_gradients]


_TWICE = (
    "blockwise attention's backward pass cannot be differentiated again "
    "(create_graph=True): for second derivatives use the materialising path, "
    "nt.attend(nt.attention_weights(...)) or a module's core=MATERIALISE"
)


class _BlockwiseAttention(torch.autograd.Function):
    """The blocks forward; FlashAttention's recomputing backward pass."""

    @staticmethod
    def forward(ctx, queries, keys, values, mask, score_bias, tiling):
        attended, maximum, normaliser = _blockwise_forward(
            queries, keys, values, mask, score_bias, tiling
        )
        ctx.save_for_backward(
            queries, keys, values, mask, score_bias, attended, maximum, normaliser
        )
        ctx.tiling = tiling
        return attended

    # --8<-- [start:backward]
    @staticmethod
    def backward(ctx, grad_attended):
        if torch.is_grad_enabled():  # create_graph=True: it would be differentiated
            raise RuntimeError(_TWICE)
        queries, keys, values, mask, score_bias, attended, maximum, normaliser = (
            ctx.saved_tensors
        )
        # D = sum_val dO * O: the softmax's sum_seq A * dA, without A
        delta = reduce(grad_attended * attended, "... seq_q val -> ... seq_q 1", "sum")
        inverse = torch.where(normaliser > 0, 1.0 / normaliser, 0.0)
        maximum = _finite(maximum)
        batch = attended.shape[:-2]
        grad_queries = queries.new_zeros(*batch, *queries.shape[-2:])
        grad_keys = keys.new_zeros(*batch, *keys.shape[-2:])
        grad_values = values.new_zeros(*batch, *values.shape[-2:])
        grad_bias = None
        if score_bias is not None and ctx.needs_input_grad[4]:
            grad_bias = torch.zeros_like(score_bias)
        scale = 1.0 / math.sqrt(queries.shape[-1])
        tables = _Tables(queries, keys)  # no gradient is recorded here
        for rows in _query_blocks(queries.shape[-2], ctx.tiling.block):
            scaled = queries[..., rows, :] * scale
            for columns, scores in _score_tiles(
                scaled, keys, rows, mask, score_bias, ctx.tiling, tables
            ):
                grad_scores, grad_q, grad_k, grad_v = _tile_gradients(
                    scores, scaled, keys[..., columns, :],
                    values[..., columns, :], grad_attended[..., rows, :],
                    maximum[..., rows, :], inverse[..., rows, :], delta[..., rows, :],
                    tables.gradients(rows, columns, batch),
                )  # fmt: skip
                grad_queries[..., rows, :] += grad_q
                grad_keys[..., columns, :] += grad_k
                grad_values[..., columns, :] += grad_v
                if grad_bias is not None:  # summed over the axes B broadcasts over
                    part = _block_of(grad_bias, rows, columns)
                    part += grad_scores.sum_to_size(part.shape)
        # keys, values (and queries) may broadcast over batch axes: sum over those
        return (
            (grad_queries * scale).sum_to_size(queries.shape),  # dQ = d\hat Q / sqrt
            grad_keys.sum_to_size(keys.shape),
            grad_values.sum_to_size(values.shape),
            None, grad_bias, None,
        )  # fmt: skip

    # --8<-- [end:backward]


# --8<-- [start:blockwise_attention]
@checked
def blockwise_attention(
    queries: Float[Tensor, "*batch seq_q key"],
    keys: Float[Tensor, "*#batch seq key"],
    values: Float[Tensor, "*#batch seq val"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    block: int | None = None,
    *,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    causal: bool = False,
    offset: int = 0,
    dropout: float = 0.0,
    training: bool = False,
) -> Float[Tensor, "*batch seq_q val"]:
    r"""$\text{Attention}(Q, K, V, M, B)$ one block of keys at a time, never holding
    the $\mathsf{seq'} \times \mathsf{seq}$ weights.

    The same function as :func:`~named_transformer.core.attention.attention` (tests
    check values and gradients). ``block``: positions per block of queries and of
    keys; None takes :func:`block_size`'s for the queries' device.
    ``causal=True`` adds the causal mask of
    :func:`~named_transformer.core.masks.causal_mask` (first query at position
    ``offset``) and skips the blocks it hides, compiled or not; a tensor ``mask`` is
    applied block by block, its hidden blocks skipped when running eagerly.
    ``dropout`` drops weights while ``training``.
    """
    check_block(block)
    if block is None:
        block = block_size(queries.device)
    tiling = Tiling(block, causal, offset)
    if training and dropout > 0.0:  # autograd through the blocks keeps the draws
        attended, _, _ = _blockwise_forward(
            queries, keys, values, mask, score_bias, tiling, dropout, training
        )
        return attended
    return _BlockwiseAttention.apply(queries, keys, values, mask, score_bias, tiling)


# --8<-- [end:blockwise_attention]


def check_block(block: int | None) -> None:
    """One line for a block size that is no positive number of positions (None: the
    one :func:`block_size` gives)."""
    if block is not None and (isinstance(block, bool) or block < 1):
        raise ValueError(
            f"block must be a positive number of positions, got block={block!r}"
        )


# --8<-- [start:automatic_block]
#: positions a block on the CPU (measured on the machine of the Performance page: see
#: the blockwise page's block size section)
BLOCK = 256
#: from this many queries and keys on, blockwise attention took at most about a tenth
#: more than the materialising path's time, and less from 448, on the machine of the
#: Performance page (its crossover table), for a mask over queries and keys (causal,
#: a window), whose hidden tiles it skips
CROSSOVER = 384
#: the same for a call that computes every tile: no mask, or a mask over the keys
#: only (padding), which hides no whole tile of a sequence's queries
FULL_CROSSOVER = 768
#: on a GPU: positions a block, and from how many queries and keys on blocks are used
#: (measured on an H200, see the blockwise page)
GPU_BLOCK, GPU_CROSSOVER = 2048, 4096


def block_size(device: torch.device | str | None = None) -> int:
    """Positions a block for blockwise attention on ``device`` (None: the CPU): what
    :func:`blockwise_attention` takes when given no ``block``, and what the automatic
    core runs. ``GPU_BLOCK`` on a GPU, ``BLOCK`` on the CPU."""
    return GPU_BLOCK if _on_gpu(device) else BLOCK


# the old name, for the modules that import it


def automatic_block(
    seq_q: int,
    seq: int,
    *,
    dropout: float = 0.0,
    value_term: bool = False,
    device: torch.device | str | None = None,
    all_tiles: bool = False,
) -> int | None:
    r"""The core chosen for a call that asks for no weights: a block size (blockwise,
    :func:`block_size`) or None (materialise). The one rule, which ``nt.attention``
    and the modules' automatic core follow.

    On the CPU, blockwise when queries and keys both number at least ``CROSSOVER``,
    or ``FULL_CROSSOVER`` when it would compute ``all_tiles``
    (:func:`~named_transformer.core.fast.computes_every_tile`): below it the whole
    $\mathsf{seq'} \times \mathsf{seq}$ table fits the CPU's caches and one pass over
    it beats a loop over blocks; above it the table spills to memory and every pass
    over it (mask, softmax, product) waits for memory. A causal mask lets blockwise
    skip half the tiles, so it wins sooner. On a GPU
    (``device``, the queries' device), each block costs a handful of kernel launches,
    so small blocks are slow: it materialises below ``GPU_CROSSOVER`` and takes blocks
    of ``GPU_BLOCK`` from there (as fast as materialising, with a table of scores an
    eighth as large at 4,096 positions). A handful of queries against many keys (a
    decoding step) materialises: its table is one row per query. Materialise as well
    when a value term reads the weights (relative positions) and under dropout (the
    blockwise draws differ, and its gradients keep every block).
    """
    if value_term or dropout > 0.0:
        return None
    if _on_gpu(device):
        crossover = GPU_CROSSOVER
    else:
        crossover = FULL_CROSSOVER if all_tiles else CROSSOVER
    return None if min(seq_q, seq) < crossover else block_size(device)


def _on_gpu(device: torch.device | str | None) -> bool:
    """Whether ``device`` is a CUDA device (None: the CPU)."""
    return device is not None and torch.device(device).type == "cuda"


# --8<-- [end:automatic_block]


class AutomaticRule:
    """The automatic choice of a core, as the one object that ``nt.attention`` and
    the modules' automatic core (:class:`~named_transformer.models.cores.Automatic`)
    both ask: :func:`automatic_block` for a call's queries, keys and mask."""

    def block(
        self,
        queries: Tensor,
        keys: Tensor,
        mask: Tensor | None = None,
        *,
        dropout: float = 0.0,
        value_term: bool = False,
    ) -> int | None:
        """A block size (blockwise) or None (materialise) for this call."""
        return automatic_block(
            queries.shape[-2], keys.shape[-2], dropout=dropout, value_term=value_term,
            device=queries.device, all_tiles=computes_every_tile(mask),
        )  # fmt: skip


AUTOMATIC_RULE = AutomaticRule()
