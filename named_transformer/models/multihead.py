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
(:func:`grouped_query_attention`, :mod:`~named_transformer.models.grouped`).

Masks are boolean, True = may attend. **`torch.nn.MultiheadAttention` reads a boolean
mask the other way round**: pass ``~attn_mask`` (and ``~key_padding_mask``) here.
"""

from __future__ import annotations

import math

import torch
from einops import einsum, rearrange
from jaxtyping import Bool, Float, TypeCheckError
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.attention import attend, attention_weights, fused_attention
from named_transformer.core.blockwise import blockwise_attention
from named_transformer.core.dropout import dropout as drop
from named_transformer.core.feedforward import _plus_bias
from named_transformer.models.grouped import (
    fused_grouped_attention,
    grouped_attend,
    grouped_attention_weights,
)
from named_transformer.models.parameters import CountsParameters

__all__ = [
    "MultiHeadAttention",
    "attend_grouped_heads",
    "attend_heads",
    "grouped_query_attention",
    "merge_heads",
    "multihead_attention",
    "multihead_self_attention",
    "project_heads",
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
        projected = _plus_bias(projected, rearrange(bias, "heads key -> heads 1 key"))
    return projected


# --8<-- [end:project_heads]


# --8<-- [start:attend_heads]
@checked
def attend_heads(
    queries: Float[Tensor, "*batch heads seq_q key"],
    keys: Float[Tensor, "*#batch heads seq key"],
    values: Float[Tensor, "*#batch heads seq val"],
    w_o: Float[Tensor, "heads val layer"],
    b_o: Float[Tensor, " layer"] | None = None,
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    dropout: float = 0.0,
    training: bool = False,
    fused: bool = False,
    *,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    block: int | None = None,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"] | None
]:
    r"""$W^O \ndot{heads, val} \text{Attention}(Q, K, V, M, B)$ from already
    projected heads.

    Keys and values are arguments of their own, so they may come from a cache of
    earlier steps (cached decoding) rather than from the same call as the queries.
    Returns the output and the attention weights (before dropout), one distribution per
    head and query. ``dropout`` drops attention weights, as in PyTorch. ``fused=True``
    computes the attention by PyTorch's fused kernel
    (:func:`~named_transformer.core.attention.fused_attention`) and returns None for
    the weights. The mask $M$ and the additive score bias $B$ (``score_bias``) are
    shared by all heads: both are lifted over $\mathsf{heads}$. ``block`` computes
    the attention ``block`` keys at a time with an online softmax
    (:func:`~named_transformer.core.blockwise.blockwise_attention`), and also returns
    None for the weights (``fused`` comes first if both are given).
    """
    if mask is not None:
        mask = rearrange(mask, "... seq_q seq -> ... 1 seq_q seq")  # lift over heads
    if score_bias is not None:
        score_bias = rearrange(score_bias, "... seq_q seq -> ... 1 seq_q seq")
    if fused:
        outputs = fused_attention(
            queries, keys, values, mask, dropout, training, score_bias=score_bias
        )
        return merge_heads(outputs, w_o, b_o), None
    if block is not None:  # the seq_q x seq weights are never materialised
        outputs = blockwise_attention(
            queries, keys, values, mask, block,
            score_bias=score_bias, dropout=dropout, training=training,
        )  # fmt: skip
        return merge_heads(outputs, w_o, b_o), None
    weights = attention_weights(queries, keys, mask, score_bias=score_bias)
    dropped = drop(weights, dropout, training)
    return merge_heads(attend(dropped, values), w_o, b_o), weights


# --8<-- [end:attend_heads]


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
    return outputs if b_o is None else _plus_bias(outputs, b_o)


# --8<-- [end:merge_heads]


# --8<-- [start:multihead_attention]
@checked
def multihead_attention(
    inputs: Float[Tensor, "*batch seq_q layer"],
    memory: Float[Tensor, "*batch seq memory"],
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "heads memory key"],
    w_v: Float[Tensor, "heads value_memory val"],
    w_o: Float[Tensor, "heads val layer"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    b_q: Float[Tensor, "heads key"] | None = None,
    b_k: Float[Tensor, "heads key"] | None = None,
    b_v: Float[Tensor, "heads val"] | None = None,
    b_o: Float[Tensor, " layer"] | None = None,
    dropout: float = 0.0,
    training: bool = False,
    fused: bool = False,
    *,
    values_from: Float[Tensor, "*batch seq value_memory"] | None = None,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    block: int | None = None,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"] | None
]:
    r"""Multi-head attention of ``inputs`` over ``memory``, the weights passed in.

    $$W^O \ndot{heads, val} \text{Attention}(
      W^Q \ndot{layer} X_{\mathsf{seq}\to\mathsf{seq'}},
      W^K \ndot{memory} X_m, W^V \ndot{memory_v} X_v, M, B).$$

    Self-attention passes the inputs as the memory ($\mathsf{memory} = \mathsf{layer}$);
    cross-attention passes the encoder output. The values come from the memory too,
    $X_v = X_m$, unless ``values_from`` gives a source $X_v$ of their own, of width
    $\mathsf{memory_v}$ (PyTorch's ``vdim`` when it differs from ``kdim``).
    ``score_bias`` is the additive bias $B$, shared by all heads. Returns (output,
    weights); the weights are None with ``fused=True`` or a ``block``
    (:func:`attend_heads`).
    """
    if values_from is None:
        if w_v.shape[-2] != memory.shape[-1]:
            raise TypeCheckError(
                f"parameter 'w_v' reads {w_v.shape[-2]} features (axis "
                f"'value_memory') but the values come from 'memory', "
                f"{memory.shape[-1]} wide: pass values_from"
            )
        values_from = memory
    queries = project_heads(inputs, w_q, b_q)
    keys = project_heads(memory, w_k, b_k)
    values = project_heads(values_from, w_v, b_v)
    return attend_heads(
        queries, keys, values, w_o, b_o, mask, dropout, training, fused,
        score_bias=score_bias, block=block,
    )  # fmt: skip


# --8<-- [end:multihead_attention]


# --8<-- [start:attend_grouped_heads]
@checked
def attend_grouped_heads(
    queries: Float[Tensor, "*batch heads seq_q key"],
    keys: Float[Tensor, "*#batch kv_heads seq key"],
    values: Float[Tensor, "*#batch kv_heads seq val"],
    w_o: Float[Tensor, "heads val layer"],
    b_o: Float[Tensor, " layer"] | None = None,
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    dropout: float = 0.0,
    training: bool = False,
    fused: bool = False,
    *,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"] | None
]:
    r"""Grouped-query attention from projected heads:
    $W^O \ndot{heads, val} \text{Attention}(
      Q_{\mathsf{heads}\to(\mathsf{kv\_heads},\mathsf{group})}, K, V, M, B)$.

    :func:`attend_heads` with $|\mathsf{kv\_heads}|$ key/value heads, each shared by
    $|\mathsf{heads}| / |\mathsf{kv\_heads}|$ query heads
    (:mod:`~named_transformer.models.grouped`): broadcast over the group, never
    repeated. The weights are per query head (None with ``fused=True``, which calls
    :func:`~named_transformer.models.grouped.fused_grouped_attention`).
    """
    if fused:
        outputs = fused_grouped_attention(
            queries, keys, values, mask, dropout, training, score_bias=score_bias
        )
        return merge_heads(outputs, w_o, b_o), None
    weights = grouped_attention_weights(queries, keys, mask, score_bias=score_bias)
    dropped = drop(weights, dropout, training)
    return merge_heads(grouped_attend(dropped, values), w_o, b_o), weights


# --8<-- [end:attend_grouped_heads]


# --8<-- [start:grouped_query_attention]
@checked
def grouped_query_attention(
    inputs: Float[Tensor, "*batch seq_q layer"],
    memory: Float[Tensor, "*batch seq memory"],
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "kv_heads memory key"],
    w_v: Float[Tensor, "kv_heads value_memory val"],
    w_o: Float[Tensor, "heads val layer"],
    mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    b_q: Float[Tensor, "heads key"] | None = None,
    b_k: Float[Tensor, "kv_heads key"] | None = None,
    b_v: Float[Tensor, "kv_heads val"] | None = None,
    b_o: Float[Tensor, " layer"] | None = None,
    dropout: float = 0.0,
    training: bool = False,
    fused: bool = False,
    *,
    values_from: Float[Tensor, "*batch seq value_memory"] | None = None,
    score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
) -> tuple[
    Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"] | None
]:
    r""":func:`multihead_attention` with fewer key/value heads than query heads.

    $$\begin{aligned}W^O \ndot{heads, val} \text{Attention}\big(
      &(W^Q \ndot{layer} X_{\mathsf{seq}\to\mathsf{seq'}})_{\mathsf{heads}\to
      (\mathsf{kv\_heads},\mathsf{group})}, \\
      &W^K \ndot{memory} X_m, W^V \ndot{memory_v} X_v, M, B\big)\end{aligned}$$

    with $W^Q \in \mathbb R^{\mathsf{heads} \times \mathsf{layer} \times \mathsf{key}}$
    and $W^K \in \mathbb R^{\mathsf{kv\_heads} \times \mathsf{memory} \times
    \mathsf{key}}$, $W^V \in \mathbb R^{\mathsf{kv\_heads} \times \mathsf{memory_v}
    \times \mathsf{val}}$: the key and value projections are $|\mathsf{group}|$
    times smaller. Returns (output, weights per query head).
    """
    if values_from is None:
        if w_v.shape[-2] != memory.shape[-1]:
            raise TypeCheckError(
                f"parameter 'w_v' reads {w_v.shape[-2]} features (axis "
                f"'value_memory') but the values come from 'memory', "
                f"{memory.shape[-1]} wide: pass values_from"
            )
        values_from = memory
    queries = project_heads(inputs, w_q, b_q)
    keys = project_heads(memory, w_k, b_k)
    values = project_heads(values_from, w_v, b_v)
    return attend_grouped_heads(
        queries, keys, values, w_o, b_o, mask, dropout, training, fused,
        score_bias=score_bias,
    )  # fmt: skip


# --8<-- [end:grouped_query_attention]


# --8<-- [start:stacked_projection]
@checked
def stack_qkv(
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "heads layer key"],
    w_v: Float[Tensor, "heads layer key"],
) -> Float[Tensor, "qkv layer"]:
    r"""The NYU notes' tall matrix: $W_{qkv}$ stacks
    $W_q^1 \dots W_q^h, W_k^1 \dots, W_v^1 \dots$.

    This is exactly PyTorch's ``in_proj_weight`` ($3hd \times d$).
    """
    return rearrange(
        [w_q, w_k, w_v], "three heads layer key -> (three heads key) layer"
    )


@checked
def stacked_projection(
    inputs: Float[Tensor, "*batch seq layer"],
    w_qkv: Float[Tensor, "qkv layer"],
    heads: int,
    b_qkv: Float[Tensor, " qkv"] | None = None,
) -> tuple[
    Float[Tensor, "*batch heads seq key"],
    Float[Tensor, "*batch heads seq key"],
    Float[Tensor, "*batch heads seq key"],
]:
    r"""$[q; k; v] = W_{qkv} \ndot{layer} x$ in one product, then split into heads.

    Equal to three calls of :func:`project_heads` (a test checks it): stacking only
    changes how the same numbers are laid out in memory.
    """
    projected = einsum(inputs, w_qkv, "... seq layer, qkv layer -> ... seq qkv")
    if b_qkv is not None:
        projected = _plus_bias(projected, b_qkv)
    q, k, v = rearrange(
        projected,
        "... seq (three heads key) -> three ... heads seq key",
        three=3,
        heads=heads,
    )
    return q, k, v


# --8<-- [end:stacked_projection]


# --8<-- [start:multihead_self_attention]
@checked
def multihead_self_attention(
    inputs: Float[Tensor, "*batch seq layer"],
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "heads layer key"],
    w_v: Float[Tensor, "heads layer key"],
    w_o: Float[Tensor, "heads key layer"],
    mask: Bool[Tensor, "*#batch #seq #seq"] | None = None,
    b_q: Float[Tensor, "heads key"] | None = None,
    b_k: Float[Tensor, "heads key"] | None = None,
    b_v: Float[Tensor, "heads key"] | None = None,
    b_o: Float[Tensor, " layer"] | None = None,
    dropout: float = 0.0,
    training: bool = False,
    fused: bool = False,
    *,
    score_bias: Float[Tensor, "*#batch #seq #seq"] | None = None,
    block: int | None = None,
) -> tuple[
    Float[Tensor, "*batch seq layer"], Float[Tensor, "*batch heads seq seq"] | None
]:
    r""":func:`multihead_attention` with $X_m = X$, projecting through the NYU notes'
    stacked $W_{qkv}$.

    When queries, keys and values all come from $X$, one product with the tall
    $W_{qkv}$ replaces three (as PyTorch's ``in_proj_weight`` does): the same numbers,
    one larger matrix multiplication. Needs $|\mathsf{val}| = |\mathsf{key}|$.
    """
    w_qkv = stack_qkv(w_q, w_k, w_v)
    b_qkv = None
    if b_q is not None and b_k is not None and b_v is not None:
        b_qkv = rearrange([b_q, b_k, b_v], "three heads key -> (three heads key)")
    queries, keys, values = stacked_projection(inputs, w_qkv, w_q.shape[0], b_qkv)
    return attend_heads(
        queries, keys, values, w_o, b_o, mask, dropout, training, fused,
        score_bias=score_bias, block=block,
    )  # fmt: skip


# --8<-- [end:multihead_self_attention]


def _uniform(*shape: int, fan_in: int, fan_out: int) -> nn.Parameter:
    """Glorot/Xavier uniform on the flattened (fan_out × fan_in) matrix, as PyTorch's
    MHA."""
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


def _block_option(block: int | None, fused: bool, grouped: bool) -> int | None:
    """``MultiHeadAttention``'s ``block``, checked against the options it excludes."""
    if block is None:
        return None
    if isinstance(block, bool) or block < 1:
        raise ValueError(f"block must be a positive number of positions, got {block!r}")
    if fused:
        raise ValueError(
            "fused=True and block are two ways around the seq_q x seq weights: "
            "choose one"
        )
    if grouped:
        raise ValueError("block is not available with kv_heads < heads (yet)")
    return block


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
        dropout: probability of dropping an attention weight while training.
        fused: compute the attention by PyTorch's fused kernel
            (:func:`~named_transformer.core.attention.fused_attention`) whenever the
            weights are not asked for. An explicit option: off, the named equations
            run.
        kv_heads: key/value heads $|\mathsf{kv\_heads}|$, each shared by
            $|\mathsf{heads}|/|\mathsf{kv\_heads}|$ query heads: grouped-query
            attention (:func:`grouped_query_attention`), multi-query when 1. Then
            $W^K, W^V, b^K, b^V$ have $\mathsf{kv\_heads}$ in place of
            $\mathsf{heads}$. Default ``heads``: multi-head attention.
        block: compute the attention ``block`` keys (and queries) at a time with an
            online softmax
            (:func:`~named_transformer.core.blockwise.blockwise_attention`) whenever
            the weights are not asked for: the same function, without the
            $\mathsf{seq'} \times \mathsf{seq}$ weights in memory. None: the named
            equations, materialised.
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
    ) -> None:
        super().__init__()
        if layer <= 0 or heads <= 0:
            raise ValueError(
                f"layer and heads must be positive, got layer={layer}, heads={heads}"
            )
        if key is None:
            if wide:
                key = layer
            elif layer % heads != 0:
                raise ValueError(
                    f"layer={layer} is not divisible by heads={heads}: "
                    "narrow heads need |key| = |layer|/|heads|; "
                    "pass key=..., or wide=True for full-width heads"
                )
            else:
                key = layer // heads
        val = key if val is None else val
        memory = layer if memory is None else memory
        value_memory = memory if value_memory is None else value_memory
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        kv_heads = heads if kv_heads is None else kv_heads
        if kv_heads < 1 or heads % kv_heads != 0:
            raise ValueError(
                f"kv_heads={kv_heads} must divide heads={heads}: each key/value head "
                "serves a group of heads / kv_heads query heads"
            )
        self.kv_heads = kv_heads  # = heads: multi-head; 1: multi-query
        self.block = _block_option(block, fused, kv_heads != heads)
        self.layer, self.heads, self.memory, self.key, self.val = (
            layer,
            heads,
            memory,
            key,
            val,
        )
        self.value_memory = value_memory
        self._stackable = (
            memory == layer and value_memory == layer and val == key
            and kv_heads == heads  # one W_qkv needs as many key heads as query heads
        )  # fmt: skip
        self.dropout, self.fused = dropout, fused
        self.w_q = _uniform(heads, layer, key, fan_in=layer, fan_out=heads * key)
        self.w_k = _uniform(
            kv_heads, memory, key, fan_in=memory, fan_out=kv_heads * key
        )
        self.w_v = _uniform(
            kv_heads, value_memory, val, fan_in=value_memory, fan_out=kv_heads * val
        )
        self.w_o = _uniform(heads, val, layer, fan_in=heads * val, fan_out=layer)
        if bias:
            self.b_q = nn.Parameter(torch.zeros(heads, key))
            self.b_k = nn.Parameter(torch.zeros(kv_heads, key))
            self.b_v = nn.Parameter(torch.zeros(kv_heads, val))
            self.b_o = nn.Parameter(torch.zeros(layer))
        else:
            for name in ("b_q", "b_k", "b_v", "b_o"):
                self.register_parameter(name, None)

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch seq_q layer"],
        memory: Float[Tensor, "*batch seq memory"] | None = None,
        mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
        need_weights: bool = False,
        *,
        values_from: Float[Tensor, "*batch seq value_memory"] | None = None,
        score_bias: Float[Tensor, "*#batch #seq_q #seq"] | None = None,
    ) -> (
        Float[Tensor, "*batch seq_q layer"]
        | tuple[
            Float[Tensor, "*batch seq_q layer"], Float[Tensor, "*batch heads seq_q seq"]
        ]
    ):
        """Self-attention when ``memory`` is None, else cross-attention over ``memory``.

        ``values_from``: the values' own source (default ``memory``), needed when the
        module was built with a ``value_memory`` of its own. ``score_bias``: an
        additive bias $B$ on the scores, shared by all heads (a float ``attn_mask``
        of PyTorch). Returns the output, or (output, per-head weights) when
        ``need_weights``.
        """
        fused = self.fused and not need_weights  # the fused kernel returns no weights
        block = None if need_weights else self.block  # nor does the blockwise one
        if memory is None and values_from is None and self._stackable:
            outputs, weights = multihead_self_attention(  # one stacked projection
                inputs, self.w_q, self.w_k, self.w_v, self.w_o, mask,
                self.b_q, self.b_k, self.b_v, self.b_o,
                self.dropout, self.training, fused, score_bias=score_bias,
                block=block,
            )  # fmt: skip
        elif self.kv_heads != self.heads:
            outputs, weights = grouped_query_attention(  # K, V shared by groups
                inputs, inputs if memory is None else memory,
                self.w_q, self.w_k, self.w_v, self.w_o, mask,
                self.b_q, self.b_k, self.b_v, self.b_o,
                self.dropout, self.training, fused,
                values_from=values_from, score_bias=score_bias,
            )  # fmt: skip
        else:
            outputs, weights = multihead_attention(
                inputs, inputs if memory is None else memory,
                self.w_q, self.w_k, self.w_v, self.w_o, mask,
                self.b_q, self.b_k, self.b_v, self.b_o,
                self.dropout, self.training, fused,
                values_from=values_from, score_bias=score_bias, block=block,
            )  # fmt: skip
        return (outputs, weights) if need_weights else outputs


# --8<-- [end:MultiHeadAttention]
