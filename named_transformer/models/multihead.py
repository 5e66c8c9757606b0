r"""Multi-head attention with named weights (the named tensor paper, Appendix A.1).

Each head projects the inputs with its own slice of named weight tensors,
$W^Q, W^K \in \mathbb R^{\mathsf{heads} \times \mathsf{layer} \times \mathsf{key}}$,
$W^V \in \mathbb R^{\mathsf{heads} \times \mathsf{layer} \times \mathsf{val}}$,
attends, and
$W^O \in \mathbb R^{\mathsf{heads} \times \mathsf{val} \times \mathsf{layer}}$ contracts
the heads and their values back to the model width:

$$Q = W^Q \ndot{layer} X_{\mathsf{seq}\to\mathsf{seq'}}, \quad
  K = W^K \ndot{layer} X, \quad
  V = W^V \ndot{layer} X,$$

$$Y = W^O \ndot{heads, val}
  \text{Attention}(Q, K, V, M, B)_{\mathsf{seq'}\to\mathsf{seq}}.$$

Attention never names $\mathsf{heads}$, so it is *lifted* over it: no loop over heads.
The mask $M$ and the optional additive score bias $B$ (``score_bias``) are lifted the
same way: one $\mathsf{seq'} \times \mathsf{seq}$ table shared by all heads.
In cross-attention the keys and values come from a memory (the encoder output) whose
width may differ from $\mathsf{layer}$ (the NYU notes' ``d_input``, PyTorch's
``kdim``/``vdim``):
$W^K \in \mathbb R^{\mathsf{heads} \times \mathsf{memory} \times \mathsf{key}}$,
$W^V \in \mathbb R^{\mathsf{heads} \times \mathsf{memory} \times \mathsf{val}}$.
PyTorch even lets the values come from a source of their own width ``vdim``: then
$V = W^V \ndot{memory_v} X_v$ with
$W^V \in \mathbb R^{\mathsf{heads} \times \mathsf{memory_v} \times \mathsf{val}}$
(``value_memory`` and ``values_from`` here).

The paper's heads are *narrow*,
$|\mathsf{key}| = |\mathsf{val}| = |\mathsf{layer}|/|\mathsf{heads}|$, so
$4|\mathsf{layer}|^2$ weights whatever the number of heads; Bloem's heads are *wide*,
each of full width $|\mathsf{key}| = |\mathsf{layer}|$ and
$W \in \mathbb R^{d \times hd}$. The NYU notes stack all projections into one tall
matrix $W_{qkv}$; :func:`stacked_projection` shows that this is the same computation
(and it is PyTorch's ``in_proj_weight`` layout).

With ``kv_heads`` < ``heads`` the keys and values have fewer heads than the queries,
each shared by a group of query heads: grouped-query attention
(:mod:`~named_transformer.models.grouped`).

**One pipeline.** Every multi-head attention of the library is :func:`multihead`:
:func:`project_qkv`, the position scheme's transform of queries and keys
(:func:`place`), then :func:`attend_projected` (the scheme's score term, the mask,
the core, the scheme's value term, $W^O$). The variants are parts plugged into it
(:mod:`~named_transformer.models.variants`); the weights travel as one
:class:`~named_transformer.models.attention_weights.AttentionWeights`.

Masks are boolean, True = may attend. **`torch.nn.MultiheadAttention` reads a boolean
mask the other way round**: pass ``~attn_mask`` (and ``~key_padding_mask``) here.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import torch
from einops import pack, rearrange, reduce
from jaxtyping import Bool, Float, Int, TypeCheckError
from torch import Tensor, nn

from named_transformer.axes import _records_gradient, checked
from named_transformer.contraction import einsum
from named_transformer.core import fast
from named_transformer.core.attention import check_groups
from named_transformer.core.scores import scaled_dot_score
from named_transformer.core.softmax import softmax
from named_transformer.models.attention_weights import AttentionWeights
from named_transformer.models.cores import (
    AUTOMATIC,
    FUSED,
    MATERIALISE,
    Blockwise,
    Core,
    Materialise,
    ValueTerm,
)
from named_transformer.models.grouped import (
    _merge_groups,
    _share_over_group,
    _split_groups,
)
from named_transformer.models.parameters import CountsParameters
from named_transformer.models.variants import (
    NO_SCHEME,
    PLAIN,
    AttentionVariant,
    Positions,
    PositionScheme,
    check_variant,
)
from named_transformer.recording import tap, tapping

__all__ = [
    "AttentionWeights",
    "Heads",
    "MultiHeadAttention",
    "attend_projected",
    "merge_heads",
    "multihead",
    "place",
    "project_heads",
    "project_qkv",
    "stack_qkv",
    "stacked_projection",
]


# --8<-- [start:project_heads]
@checked
def project_heads(
    inputs: Float[Tensor, "*batch seq layer"],
    weight: Float[Tensor, "heads layer key"],
    bias: Float[Tensor, "heads key"] | None = None,
) -> Float[Tensor, "*batch heads seq key"]:
    r"""$W \ndot{layer} X (+ b)$: one projection per head, all heads in one contraction.

    The same equation gives queries, keys and values: the names bound here are local to
    the call ($\mathsf{seq}$ may be $\mathsf{seq'}$, $\mathsf{layer}$ may be
    $\mathsf{memory}$, $\mathsf{key}$ may be $\mathsf{val}$).
    """
    projected = einsum(
        inputs, weight, "... seq layer, heads layer key -> ... heads seq key"
    )
    if bias is not None:
        by_head = rearrange(bias, "heads key -> heads 1 key")
        projected = fast.plus_bias(projected, by_head)
    return projected


# --8<-- [end:project_heads]


# --8<-- [start:merge_heads]
@checked
def merge_heads(
    heads_out: Float[Tensor, "*batch heads seq_q val"],
    w_o: Float[Tensor, "heads val layer"],
    b_o: Float[Tensor, " layer"] | None = None,
) -> Float[Tensor, "*batch seq_q layer"]:
    r"""$W^O \ndot{heads, val} Y (+ b^O)$: contract the heads and their values back to
    $\mathsf{layer}$.

    One contraction over two axes: the "concatenate the heads, then a linear layer" of
    Bloem and the NYU notes, without the concatenation.
    """
    outputs = einsum(
        heads_out, w_o, "... heads seq_q val, heads val layer -> ... seq_q layer"
    )
    return outputs if b_o is None else fast.plus_bias(outputs, b_o)


# --8<-- [end:merge_heads]


# --8<-- [start:stack_qkv]
@checked
def stack_qkv(
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "kv_heads layer key"],
    w_v: Float[Tensor, "kv_heads layer key"],
) -> Float[Tensor, "qkv layer"]:
    r"""The NYU notes' tall matrix: $W_{qkv}$ stacks
    $W_q^1 \dots W_q^h, W_k^1 \dots, W_v^1 \dots$.

    This is exactly PyTorch's ``in_proj_weight`` ($3hd \times d$). With grouped-query
    attention (fewer $\mathsf{kv\_heads}$) it is $(h + 2 h_{kv}) d$ tall: the heads of
    all three weights are one axis, $\mathsf{parts}$.
    """
    # packed layer-major (one copy), so that merging (parts key) below is a view, and
    # the product with W_qkv reads it as it lies, with no second copy
    by_layer = [
        rearrange(weight, "heads layer key -> layer heads key")
        for weight in (w_q, w_k, w_v)
    ]
    parts, _ = pack(by_layer, "layer * key")  # the heads, one after another
    return rearrange(parts, "layer parts key -> (parts key) layer")


# --8<-- [end:stack_qkv]


# --8<-- [start:stacked_projection]
@checked
def stacked_projection(
    inputs: Float[Tensor, "*batch seq layer"],
    w_qkv: Float[Tensor, "qkv layer"],
    heads: int,
    b_qkv: Float[Tensor, " qkv"] | None = None,
    *,
    kv_heads: int | None = None,
) -> tuple[
    Float[Tensor, "*batch heads seq key"],
    Float[Tensor, "*batch kv_heads seq key"],
    Float[Tensor, "*batch kv_heads seq key"],
]:
    r"""$[q; k; v] = W_{qkv} \ndot{layer} x$ in one product, then split into heads
    (``kv_heads`` of keys and values; as many as ``heads`` unless given).

    Equal to three calls of :func:`project_heads` (a test checks it): stacking only
    changes how the same numbers are laid out in memory.
    """
    kv_heads = heads if kv_heads is None else kv_heads
    projected = einsum(inputs, w_qkv, "... seq layer, qkv layer -> ... seq qkv")
    if b_qkv is not None:
        projected = fast.plus_bias(projected, b_qkv)
    by_head = rearrange(projected, "... seq (parts key) -> ... parts seq key",
                        parts=heads + 2 * kv_heads)  # fmt: skip
    keys_from = heads + kv_heads  # where the keys' heads end and the values' begin
    return (
        by_head[..., :heads, :, :],
        by_head[..., heads:keys_from, :, :],
        by_head[..., keys_from:, :, :],
    )


# --8<-- [end:stacked_projection]


@checked
def stacked_weights(
    weights: AttentionWeights,
) -> tuple[Float[Tensor, "qkv layer"], Float[Tensor, " qkv"] | None]:
    """$W_{qkv}$ and $b_{qkv}$ (None without biases) of stackable weights."""
    return stack_qkv(weights.w_q, weights.w_k, weights.w_v), stacked_biases(weights)


@checked
def stacked_biases(weights: AttentionWeights) -> Float[Tensor, " qkv"] | None:
    """$b_{qkv}$, the biases stacked as :func:`stack_qkv` stacks the weights (None
    without biases)."""
    if weights.b_q is None:
        return None
    biases, _ = pack([weights.b_q, weights.b_k, weights.b_v], "* key")
    return rearrange(biases, "parts key -> (parts key)")


# --8<-- [start:Heads]
class Heads(NamedTuple):
    """Queries, keys and values per head, as the pipeline passes them on."""

    queries: Float[Tensor, "*batch heads seq_q key"]
    keys: Float[Tensor, "*#batch kv_heads seq key"]
    values: Float[Tensor, "*#batch kv_heads seq val"]


# --8<-- [end:Heads]


def _tapped(heads: Heads) -> Heads:
    """Q, K and V per head, through the taps ``queries``, ``keys``, ``values``
    (:mod:`~named_transformer.recording`)."""
    if tapping() is None:
        return heads
    return Heads(
        tap("queries", heads.queries, "*batch heads seq_q key"),
        tap("keys", heads.keys, "*batch kv_heads seq key"),
        tap("values", heads.values, "*batch kv_heads seq val"),
    )


def _project_qkv_stacked(
    inputs: Tensor,
    memory: Tensor,
    weights: AttentionWeights,
    *,
    values_from: Tensor | None = None,
) -> Heads:
    """:func:`project_qkv` computed faster (a test checks the two equal): in
    self-attention (``memory`` *is* ``inputs``, keys and values as wide as queries)
    while a gradient is recorded, the three projections are one product with the
    stacked $W_{qkv}$ (:func:`stacked_projection`): the same numbers, one larger
    multiplication, whose backward pass is faster than three. Without a gradient it
    makes the equation's three products: where a projection's input is smaller than
    its weight the library's ``einsum`` reads the weight as it lies, where stacking
    would copy all three on every call."""
    projections = (weights.w_q, weights.w_k, weights.w_v,
                   weights.b_q, weights.b_k, weights.b_v)  # fmt: skip
    self_attention = memory is inputs and values_from in (None, inputs)
    stack = self_attention and weights.stackable
    if not (stack and _records_gradient(inputs, *projections)):
        return project_qkv.equation(inputs, memory, weights, values_from=values_from)
    weights.check(inputs, memory, values_from)  # as the equation: axes bound first
    w_qkv, b_qkv = stacked_weights(weights)
    projected = stacked_projection(
        inputs, w_qkv, weights.w_q.shape[0], b_qkv, kv_heads=weights.w_k.shape[0]
    )
    return _tapped(Heads(*projected))


# --8<-- [start:project_qkv]
@checked
@fast.stand_in(_project_qkv_stacked)
def project_qkv(
    inputs: Float[Tensor, "*batch seq_q layer"],
    memory: Float[Tensor, "*batch seq memory"],
    weights: AttentionWeights,
    *,
    values_from: Float[Tensor, "*batch seq value_memory"] | None = None,
) -> Heads:
    r"""$Q = W^Q \ndot{layer} X$, $K = W^K \ndot{memory} X_m$,
    $V = W^V \ndot{memory_v} X_v$.

    The values come from the memory, $X_v = X_m$, unless ``values_from`` gives a
    source of their own (PyTorch's ``vdim`` beside ``kdim``). In self-attention while
    a gradient is recorded, the three products are computed as one with the stacked
    $W_{qkv}$ (:func:`stacked_projection`, the same numbers; ``tests/test_fast.py``
    checks it).
    """
    weights.check(inputs, memory, values_from)
    if values_from is None:
        if weights.w_v.shape[-2] != memory.shape[-1]:
            raise TypeCheckError(
                f"parameter 'w_v' reads {weights.w_v.shape[-2]} features (axis "
                f"'value_memory') but the values come from 'memory', "
                f"{memory.shape[-1]} wide: pass values_from"
            )
        values_from = memory
    return _tapped(Heads(
        project_heads(inputs, weights.w_q, weights.b_q),
        project_heads(memory, weights.w_k, weights.b_k),
        project_heads(values_from, weights.w_v, weights.b_v),
    ))  # fmt: skip


# --8<-- [end:project_qkv]


def _lift_over_heads(table: Tensor | None) -> Tensor | None:
    """A mask or bias shared by all heads: a size-1 ``heads`` axis."""
    if table is None:
        return None
    return rearrange(table, "... seq_q seq -> ... 1 seq_q seq")


class _TappedCore(Materialise):
    r"""The materialising core, its weights computed with the scores $S + T + B$
    and the weights $A$ tapped per query head (``scores``, ``weights``): what
    :func:`attend_projected` runs while either is recorded or edited, whatever the
    attention's own core. Grouped heads are merged for the taps,
    $(\mathsf{kv\_heads}, \mathsf{group}) \to \mathsf{heads}$, and split again."""

    def __init__(self, kv_heads: int | None) -> None:
        self.kv_heads = kv_heads  # None: not grouped

    def _tap(self, name: str, table: Tensor) -> Tensor:
        if self.kv_heads is None:
            return tap(name, table, "*batch heads seq_q seq")
        merged = tap(name, _merge_groups(table), "*batch heads seq_q seq")
        return _split_groups(merged, self.kv_heads)

    def weights(self, queries, keys, mask, bias) -> Tensor:
        # the operations of attention_weights, with two taps
        scores = scaled_dot_score(queries, keys)
        if bias is None:
            weights = softmax(self._tap("scores", scores), mask)
        else:
            tapped = self._tap("scores", scores + bias)  # the record's, or an edit
            weights = fast.biased_softmax(tapped, mask, overwrite=False)
        return self._tap("weights", weights)


def _contributions(attended: Tensor, w_o: Tensor, outputs: Tensor) -> Tensor:
    r"""Each head's part of the output, $W^O_h \ndot{val} Y_h$, tapped as
    ``contributions`` (``*batch heads seq_q layer``); their sum over heads is
    $W^O \ndot{heads, val} Y$. An edit of them changes ``outputs`` by the sum of the
    edit's differences (zero when a head's own value is put back)."""
    parts = einsum(
        attended, w_o, "... heads seq_q val, heads val layer -> ... heads seq_q layer"
    )
    edited = tap("contributions", parts, "*batch heads seq_q layer")
    if edited is parts:
        return outputs
    return outputs + reduce(edited - parts, "... heads seq_q layer -> ... seq_q layer",
                            "sum")  # fmt: skip


def _plus(first: Tensor | None, second: Tensor | None) -> Tensor | None:
    """The sum of two additive score terms, either of which may be absent."""
    if first is None or second is None:
        return second if first is None else first
    return first + second


@checked
def _bind_heads(  # the heads' axes meet W^O's, the mask's and the bias's here
    queries: Float[Tensor, "*batch heads seq_q key"],
    keys: Float[Tensor, "*#batch kv_heads seq key"],
    values: Float[Tensor, "*#batch kv_heads seq val"],
    w_o: Float[Tensor, "heads val layer"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None,
) -> None:
    del queries, keys, values, w_o, mask, score_bias


def _score_terms(
    positions: Positions, heads: Heads, score_bias: Tensor | None, offset
) -> Tensor | None:
    """$T + B$: the scheme's score term (per head, or none) and the caller's bias
    (shared by all heads), either of which may be absent."""
    term = positions.score_term(heads.queries, heads.keys.shape[-2], offset)
    return _plus(term, _lift_over_heads(score_bias))


def _value_term_at(positions: Positions, offset) -> ValueTerm | None:
    """$U(A)$, the scheme's value term from position ``offset`` (None: none)."""
    if not positions.uses_weights:
        return None
    return functools.partial(positions.value_term, offset=offset)


def _recording_core(core: Core, heads: Heads) -> Core:
    """``core``, or while the scores or weights are recorded or edited the
    materialising core that taps them per query head (whatever the attention's own
    core)."""
    session = tapping()
    if session is None or not (session.wants("scores") or session.wants("weights")):
        return core
    kv_heads = heads.keys.shape[-3]
    return _TappedCore(None if kv_heads == heads.queries.shape[-3] else kv_heads)


def _merge_heads_recorded(
    attended: Tensor, w_o: Tensor, b_o: Tensor | None
) -> Tensor:
    """:func:`merge_heads`, with each head's contribution tapped while recorded or
    edited (``contributions``)."""
    merged = merge_heads(attended, w_o, b_o)
    session = tapping()
    if session is not None and session.wants("contributions"):
        merged = _contributions(attended, w_o, merged)
    return merged


# --8<-- [start:grouping]
def _attention_by_core(
    core: Core,
    heads: Heads,
    mask: Tensor | None,
    bias: Tensor | None,
    dropout: float,
    value_term: ValueTerm | None,
) -> tuple[Tensor, Tensor | None]:
    r"""$\text{Attention}(Q, K, V, M, T + B) + U(A)$ by ``core``. With fewer key/value
    heads than query heads, the query heads (and a per-head $T$) are split
    $\mathsf{heads} \to (\mathsf{kv\_heads}, \mathsf{group})$ and the keys, values
    and mask get a size-1 $\mathsf{group}$ axis, unless the core groups the heads
    itself (the fused kernel's ``enable_gqa``)."""
    queries, keys, values = heads
    kv_heads = keys.shape[-3]
    if kv_heads == queries.shape[-3] or core.groups_heads:
        return core(queries, keys, values, mask, bias, dropout, value_term)
    queries = _split_groups(queries, kv_heads)
    keys, values = _share_over_group(keys), _share_over_group(values)
    mask = None if mask is None else _share_over_group(mask)
    bias = None if bias is None else _split_groups(bias, kv_heads)
    outputs, weights = core(queries, keys, values, mask, bias, dropout, value_term)
    return _merge_groups(outputs), None if weights is None else _merge_groups(weights)


# --8<-- [end:grouping]


# --8<-- [start:attend_projected]
@checked
def attend_projected(
    heads: Heads,
    w_o: Float[Tensor, "heads val layer"],
    b_o: Float[Tensor, " layer"] | None = None,
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    *,
    variant: AttentionVariant = PLAIN,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    offset: int | Int[Tensor, " 1"] = 0,
    dropout: float = 0.0,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"] | None
]:
    r"""$W^O \ndot{heads, val} \big(\text{Attention}(Q, K, V, M, T + B)
    + U(A)\big) (+ b^O)$ from projected heads.

    $T$ is the position scheme's score term (per head, or none), $B$ the caller's
    ``score_bias`` and $M$ the ``mask`` (both shared by all heads: lifted over
    $\mathsf{heads}$), $U(A)$ its value term; the core computes the attention
    (:mod:`~named_transformer.models.cores`). With fewer key/value heads than query
    heads, the query heads (and a per-head $T$) are split
    $\mathsf{heads} \to (\mathsf{kv\_heads}, \mathsf{group})$ and the keys, values
    and mask get a size-1 $\mathsf{group}$ axis: broadcast, never copied
    (:mod:`~named_transformer.models.grouped`); the fused core groups them itself.
    While the scores or weights are recorded, the materialising core runs and taps
    them (:mod:`~named_transformer.recording`). ``offset`` is the first query's
    position counted from the first key. Returns (output, weights per query head,
    before dropout); the weights are None from a core that does not materialise them.
    """
    positions, core = check_variant(variant)
    _bind_heads(*heads, w_o, mask, score_bias)  # heads' axes meet W^O's, M's, B's
    outputs, weights = _attention_by_core(
        _recording_core(core, heads), heads, _lift_over_heads(mask),
        _score_terms(positions, heads, score_bias, offset),
        dropout, _value_term_at(positions, offset),
    )  # fmt: skip
    outputs = tap("attended", outputs, "*batch heads seq_q val")
    return _merge_heads_recorded(outputs, w_o, b_o), weights


# --8<-- [end:attend_projected]


# --8<-- [start:multihead]
@checked
def place(
    heads: Heads, positions: Positions, offset: int | Int[Tensor, " 1"] = 0
) -> Heads:
    """The queries rotated from position ``offset``, the keys from 0 (a no-op for
    schemes that do not rotate)."""
    queries = positions.rotate(heads.queries, offset)
    keys = positions.rotate(heads.keys, 0)
    if queries is not heads.queries:  # a scheme that rotates: R(Q), R(K) tapped
        queries = tap("rotated_queries", queries, "*batch heads seq_q key")
        keys = tap("rotated_keys", keys, "*batch kv_heads seq key")
    return heads._replace(queries=queries, keys=keys)


@checked
def multihead(
    inputs: Float[Tensor, "*batch seq_q layer"],
    memory: Float[Tensor, "*batch seq memory"],
    weights: AttentionWeights,
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    *,
    variant: AttentionVariant = PLAIN,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    offset: int = 0,
    dropout: float = 0.0,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"] | None
]:
    r"""Multi-head attention of ``inputs`` over ``memory``: the whole pipeline.

    $$\begin{aligned}W^O \ndot{heads, val} \text{Attention}\big(
      &R_{\text{offset}}(W^Q \ndot{layer} X_{\mathsf{seq}\to\mathsf{seq'}}), \\
      &R_0(W^K \ndot{memory} X_m), W^V \ndot{memory} X_m, M, T + B\big) + \dots
      \end{aligned}$$

    Self-attention passes the inputs as the memory. ``variant`` picks the position
    scheme ($R$, $T$, $U$: its part's ``rotate``, ``score_term`` and ``value_term``)
    and the core; ``offset`` is the first query's position counted from the first
    key; ``dropout`` is the probability of dropping an attention weight (0 outside
    training). Returns (output, weights per head); the weights are None from a core
    that does not form their whole table (fused, blockwise). A query with no allowed
    key attends to nothing: its weights are zeros and its output is $b^O$ (zeros
    without it), with zero gradient, never NaN.
    """
    heads = place(project_qkv(inputs, memory, weights), variant.positions, offset)
    return attend_projected(
        heads, weights.w_o, weights.b_o, mask,
        variant=variant, score_bias=score_bias, offset=offset, dropout=dropout,
    )  # fmt: skip


# --8<-- [end:multihead]


def check_options(
    layer: int,
    heads: int,
    *,
    key: int | None,
    wide: bool,
    dropout: float,
    kv_heads: int | None,
) -> None:
    """The options of a :class:`MultiHeadAttention` that no weights can take,
    refused, each in one line that names the problem: sizes that are not positive,
    narrow heads that do not divide the width, a dropout that is not a probability,
    key/value heads that do not divide the heads."""
    if layer <= 0 or heads <= 0:
        raise ValueError(
            f"layer and heads must be positive, got layer={layer}, heads={heads}"
        )
    if key is None and not wide and layer % heads != 0:
        raise ValueError(
            f"layer={layer} is not divisible by heads={heads}: "
            "narrow heads need |key| = |layer|/|heads|; "
            "pass key=..., or wide=True for full-width heads"
        )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    check_groups(heads, heads if kv_heads is None else kv_heads)


def glorot_uniform(*shape: int, fan_in: int) -> nn.Parameter:
    """Glorot/Xavier uniform, as PyTorch's MHA: the weight read as a matrix from
    ``fan_in`` features to the rest of its elements."""
    fan_out = math.prod(shape) // fan_in
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


def zero_bias(learned: bool, *shape: int) -> nn.Parameter | None:
    """A learned bias, zeros at first; None when not ``learned``."""
    return nn.Parameter(torch.zeros(*shape)) if learned else None


def chosen_core(fused: bool, block: int | None, materialise: bool = False) -> Core:
    """``MultiHeadAttention``'s core when no weights are recorded: the one its
    options name, else chosen for each call (:data:`AUTOMATIC`)."""
    named = [
        name
        for name, given in (
            ("fused=True", fused), ("block", block is not None),
            ("materialise=True", materialise),
        )
        if given
    ]  # fmt: skip
    if len(named) > 1:
        raise ValueError(
            f"{' and '.join(named)} name two cores for the same attention: choose one"
        )
    if fused:
        return FUSED
    if materialise:
        return MATERIALISE
    return AUTOMATIC if block is None else Blockwise(block)


# --8<-- [start:MultiHeadAttention]
class MultiHeadAttention(CountsParameters, nn.Module):
    r"""Multi-head attention holding $W^Q, W^K, W^V, W^O$ as named parameters.

    Args:
        layer: model width $|\mathsf{layer}|$ of the queries and of the output.
        heads: number of heads $|\mathsf{heads}|$.
        memory: width of the keys' and values' source (cross-attention); default
            ``layer``.
        value_memory: width $|\mathsf{memory_v}|$ of the values' source when it
            differs from the keys' (PyTorch's ``vdim`` beside ``kdim``), so
            $W^V \in \mathbb R^{\mathsf{heads} \times \mathsf{memory_v} \times
            \mathsf{val}}$; default ``memory``. The values then come from
            ``forward``'s ``values_from``.
        key, val: widths of one head; default $|\mathsf{layer}|/|\mathsf{heads}|$
            (narrow, the paper) or $|\mathsf{layer}|$ when ``wide=True`` (Bloem).
        bias: learn $b^Q, b^K \in \mathbb R^{\mathsf{heads}\times\mathsf{key}}$,
            $b^V \in \mathbb R^{\mathsf{heads}\times\mathsf{val}}$ and
            $b^O \in \mathbb R^{\mathsf{layer}}$ (PyTorch's default).
        qkv_bias: learn $b^Q, b^K, b^V$ (True) or not (False) whatever ``bias``
            says of $b^O$; None: as ``bias``. Qwen2 projects with biases and merges
            without: ``bias=False, qkv_bias=True``.
        dropout: probability of dropping an attention weight while training.
        fused: compute the attention by PyTorch's fused kernel
            (:func:`~named_transformer.core.attention.fused_attention`) whenever the
            weights are not recorded. An explicit option: off, the named equations
            run (materialising or blockwise, see ``block``).
        kv_heads: key/value heads $|\mathsf{kv\_heads}|$, each shared by
            $|\mathsf{heads}|/|\mathsf{kv\_heads}|$ query heads: grouped-query
            attention, multi-query when 1. Then
            $W^K, W^V, b^K, b^V$ have $\mathsf{kv\_heads}$ in place of
            $\mathsf{heads}$. Default ``heads``: multi-head attention.
        block: compute the attention ``block`` keys (and queries) at a time with an
            online softmax
            (:func:`~named_transformer.core.blockwise.blockwise_attention`) whenever
            the weights are not recorded: the same function, without the
            $\mathsf{seq'} \times \mathsf{seq}$ weights in memory. None: chosen
            for each call by its sizes (the automatic core of
            :mod:`~named_transformer.models.cores`): materialised for short
            sequences, blockwise for long ones.
        materialise: always the named equations with the weights materialised, the
            path the pages explain (what recording the weights runs).
        positions: the position scheme
            (:class:`~named_transformer.models.variants.PositionScheme`):
            ``Rotary(base)``, ``ALiBi(symmetric)``, ``Relative(max_distance)``; its
            part is :attr:`positions`. Default: none (the embeddings carry them).

    The module holds the parameters and the parts: :attr:`positions` and the core
    (from ``fused``, ``block`` and ``materialise``); :meth:`forward` runs the one
    pipeline. Options no weights can take are refused by :func:`check_options`, and a
    pair the pipeline cannot run (relative positions, which need the weights, on the
    fused or blockwise core) by
    :func:`~named_transformer.models.variants.check_variant`, each in one line.
    """

    def __init__(
        self,
        layer: int,
        heads: int,
        *,
        memory: int | None = None,
        value_memory: int | None = None,
        key: int | None = None,
        val: int | None = None,
        wide: bool = False,
        bias: bool = True,
        dropout: float = 0.0,
        fused: bool = False,
        kv_heads: int | None = None,
        block: int | None = None,
        qkv_bias: bool | None = None,
        materialise: bool = False,
        positions: PositionScheme = NO_SCHEME,
    ) -> None:
        super().__init__()
        check_options(layer, heads, key=key, wide=wide, dropout=dropout,
                      kv_heads=kv_heads)  # fmt: skip
        key = (layer if wide else layer // heads) if key is None else key
        val = key if val is None else val
        memory = layer if memory is None else memory
        value_memory = memory if value_memory is None else value_memory
        kv_heads = heads if kv_heads is None else kv_heads  # 1: multi-query
        self.layer, self.heads, self.kv_heads = layer, heads, kv_heads
        self.key, self.val = key, val  # the widths of one head
        self.memory, self.value_memory = memory, value_memory
        self.dropout, self.fused, self.block = dropout, fused, block
        self.core = chosen_core(fused, block, materialise)
        self.w_q = glorot_uniform(heads, layer, key, fan_in=layer)
        self.w_k = glorot_uniform(kv_heads, memory, key, fan_in=memory)
        self.w_v = glorot_uniform(kv_heads, value_memory, val, fan_in=value_memory)
        self.w_o = glorot_uniform(heads, val, layer, fan_in=heads * val)
        # registered in the order b_q, b_k, b_v, b_o that saved optimizer states expect
        qkv_bias = bias if qkv_bias is None else qkv_bias
        self.register_parameter("b_q", zero_bias(qkv_bias, heads, key))
        self.register_parameter("b_k", zero_bias(qkv_bias, kv_heads, key))
        self.register_parameter("b_v", zero_bias(qkv_bias, kv_heads, val))
        self.register_parameter("b_o", zero_bias(bias, layer))
        # the scheme's part, sized by this attention (a module where it has
        # parameters, registered after W and b, where saved optimizer states expect)
        self.positions = positions.part(self)
        check_variant(self.variant())  # relative + fused or blockwise: refused here

    def named_weights(self) -> AttentionWeights:
        """$W^Q, W^K, W^V, W^O$ and the biases, as one container."""
        return AttentionWeights.of(self)

    # --8<-- [end:MultiHeadAttention]

    @classmethod
    def of(cls, config: Any, *, causal: bool, **options: Any) -> MultiHeadAttention:
        """The self-attention of a stack built from ``config`` (a
        :class:`~named_transformer.models.config.TransformerConfig`) that attends
        causally (a decoder) or both ways (an encoder): every attention option of the
        configuration, its positions among them, reaches it; ``options`` add others
        (``memory``) or override (a cross-attention: ``positions``, ``kv_heads``)."""
        options = {**config.attention_options(causal), **options}
        return cls(config.layer, config.heads, **options)

    def position_scheme(self) -> Positions:
        """The position part this attention plugs in (:attr:`positions`)."""
        return self.positions

    #: weights saved under older names (before 0.9 the relative tables were the
    #: attention's own parameters) -> their names now
    RENAMED = {"a_k": "positions.a_k", "a_v": "positions.a_v"}

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        for old, new in self.RENAMED.items():
            if prefix + old in state_dict and prefix + new not in state_dict:
                state_dict[prefix + new] = state_dict.pop(prefix + old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def _stackable(self) -> bool:  # 0.4.0's name, which tests and callers read
        return self.named_weights().stackable

    def variant(self) -> AttentionVariant:
        """The parts of one call: the position scheme and the core (the
        materialising one while the weights are recorded: :func:`attend_projected`)."""
        return AttentionVariant(self.position_scheme(), self.core)

    # --8<-- [start:forward]
    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq_q layer"],
        memory: Float[Tensor, "*batch seq memory"] | None = None,
        mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
        *,
        offset: int = 0,
        values_from: Float[Tensor, "*batch seq value_memory"] | None = None,
        score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    ) -> Float[Tensor, "*batch seq_q layer"]:
        """Self-attention when ``memory`` is None, else cross-attention over ``memory``.

        ``offset``: the first query's position, the keys starting at 0 (for position
        schemes). ``values_from``: the values' own source (default ``memory``),
        needed when the module was built with a ``value_memory`` of its own.
        ``score_bias``: an additive bias $B$ on the scores, shared by all heads (a
        float ``attn_mask`` of PyTorch). The per-head weights are recorded, not
        returned: ``with nt.record(attention) as found``, then ``found["weights"]``
        (:mod:`~named_transformer.recording`).
        """
        variant = self.variant()
        heads = project_qkv(
            inputs, inputs if memory is None else memory, self.named_weights(),
            values_from=values_from,
        )  # fmt: skip
        outputs, _ = attend_projected(
            place(heads, variant.positions, offset), self.w_o, self.b_o, mask,
            variant=variant, score_bias=score_bias, offset=offset,
            dropout=self.dropout if self.training else 0.0,
        )  # fmt: skip
        return outputs

    # --8<-- [end:forward]
