r"""The key/value cache: a decoder step that projects only the new token.

**The key/value cache.** A decoder's step $j$ needs the keys and values of positions
$< j$ in every self-attention layer, which do not change once computed (the causal mask
stops them from seeing later tokens). The cache keeps them, so each step projects only
the new token: its query is at position ``offset`` = cache length and attends the cached
keys plus its own (:func:`~named_transformer.core.masks.causal_mask` and
:func:`~named_transformer.core.positions.relative_position_index` both take that
offset). In cross-attention the keys and values of the memory are computed once. The
cached step is built from the modules' own pipeline
(:func:`~named_transformer.models.multihead.stacked_projection` through the NYU notes'
$W_{qkv}$, stacked once per decoding, the module's position part, and
:func:`~named_transformer.models.multihead.attend_projected` with its core) and gives
the same log-probabilities as recomputing the whole prefix (a test checks ≤ 1e-5). The
cache keeps room to spare along $\mathsf{seq}$, so a step writes only its own keys and
values.

**The plan.** On one token, calling a module (its dispatch, its shape-check wrapper,
its taps) costs about as much as the arithmetic inside it. So each layer's residual
sublayers, norms and feed-forward are read once per decoding into a plan that calls
their equations (:func:`~named_transformer.core.norm.layer_norm`,
:func:`~named_transformer.core.norm.rms_norm`,
:func:`~named_transformer.core.feedforward.feed_forward`,
:func:`~named_transformer.core.feedforward.gated_feed_forward`) with the modules'
weights. The same functions, fewer Python layers around them: the numbers are those of
the modules. While the model trains (its dropout) or a recording or edit is open (the
modules' taps), and for module kinds the plan does not know, the step calls the
modules.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from named_transformer.core.feedforward import feed_forward, gated_feed_forward
from named_transformer.core.masks import causal_mask, sliding_window_mask
from named_transformer.core.norm import layer_norm, rms_norm
from named_transformer.core.rotary import rotary_angles
from named_transformer.models.cores import Automatic, Core, Materialise
from named_transformer.models.multihead import (
    Heads,
    MultiHeadAttention,
    _attention_by_core,
    attend_projected,
    project_heads,
    project_qkv,
    stacked_biases,
    stacked_projection,
    stacked_weights,
)
from named_transformer.models.rotary import Rotary
from named_transformer.models.sublayers import (
    ACTIVATIONS,
    FeedForward,
    GatedFeedForward,
    LayerNorm,
    Residual,
    RMSNorm,
)
from named_transformer.models.variants import AttentionVariant, Positions
from named_transformer.recording import tapping

__all__ = ["IncrementalDecoder"]


@dataclass
class _LayerCache:
    keys: Tensor | None = None  # batch kv_heads seq key, with spare room along seq
    values: Tensor | None = None
    memory_keys: Tensor | None = None
    memory_values: Tensor | None = None
    # the self-attention's stacked W_qkv, built once per decoding
    w_qkv: Tensor | None = None
    b_qkv: Tensor | None = None
    # absolute positions of the buffers' slot 0 and of the first key the last step
    # attended (both move only under a sliding window)
    start: int = 0
    first: int = 0


#: each self-attention's W_qkv on the CPU, its memory reused by the module's next
#: decoder (held as long as the module lives: SmolLM2's are 66 MB)
_W_QKV: weakref.WeakKeyDictionary[MultiHeadAttention, Tensor] = (
    weakref.WeakKeyDictionary()
)


def _stacked_weights(attention: MultiHeadAttention, entry: _LayerCache) -> None:
    """The stacked W_qkv (and b_qkv) of a self-attention, one product per cached step.

    The weights do not change while decoding, so the stacking is paid once; each step
    then projects the new tokens with one matrix product instead of three, with any
    number of key/value heads. (Not when values are narrower or wider than keys: then
    the three stay separate.)

    On the CPU a decoder writes W_qkv, from the weights as they are now, into the
    memory the module's last decoder used (:data:`_W_QKV`), not into a new tensor:
    fresh memory costs page faults, and for SmolLM2's 66 MB they made a new decoder
    take 41 ms instead of 9 (a compiled one 135 ms instead of 10; construction timed
    back to back, medians of 15), beside a 256-token prefill of about 500 ms. So a
    decoder still in use when its model's weights change and a new decoder is made
    reads the new W_qkv from then on; it reads every other weight from the modules
    as they are at each step anyway. (A test checks that the memory written equals
    :func:`~named_transformer.models.multihead.stacked_weights`, whose layout it
    repeats.)
    """
    weights = attention.named_weights()
    if not weights.stackable:
        return
    parts = (weights.w_q, weights.w_k, weights.w_v)
    stacked_heads = sum(weight.shape[0] for weight in parts)
    layer, key = weights.w_q.shape[1:]
    held = _W_QKV.pop(attention, None)  # dropped if the weights left the CPU
    on_cpu = weights.w_q.device.type == "cpu"
    if not on_cpu or held is None or (held.shape, held.dtype) != (
        (stacked_heads * key, layer), weights.w_q.dtype
    ):
        entry.w_qkv, entry.b_qkv = stacked_weights(weights)
        if on_cpu:  # (CUDA's caching allocator reuses memory already)
            _W_QKV[attention] = entry.w_qkv
        return
    # stack_qkv's layout: layer-major, the heads of the three one after another
    by_layer = rearrange(held, "(parts key) layer -> layer parts key", key=key)
    first = 0
    for weight in parts:
        written = by_layer[:, first : first + weight.shape[0]]
        written.copy_(rearrange(weight, "heads layer key -> layer heads key"))
        first += weight.shape[0]
    entry.w_qkv, entry.b_qkv = held, stacked_biases(weights)
    _W_QKV[attention] = held


def _cached_attention(
    attention: MultiHeadAttention,
    heads: Heads,
    mask: Tensor | None,
    variant: AttentionVariant,
    offset,
) -> Tensor:
    """Attention of new queries over (cached + new) keys and values: the module's own
    pipeline, with its position scheme and core (``variant``).

    ``offset`` is the first query's position counted from the first key given (the
    absolute position, unless a sliding window has dropped earlier keys).
    """
    outputs, _ = attend_projected(
        heads, attention.w_o, attention.b_o, mask, variant=variant, offset=offset
    )
    return outputs


class _PromptCore(Core):
    r"""The core a cached step runs for a materialising or automatic attention:
    PyTorch's fused ``scaled_dot_product_attention`` for a prompt read from position
    0, where the mask is the causal rule; the attention's own core otherwise.

    A step discards the attention weights, so the core that materialises them for
    the pages only costs time here: on SmolLM2's 256-token prompt the weights, their
    mask and the copies that lay the grouped heads out for the products took a tenth
    of the prefill. The kernel computes the same function (tests/test_fast.py checks
    ``scaled_dot_product_attention`` against the equation, causal masks included),
    skipping the hidden half of the scores and taking the grouped heads as they are.

    The decoder's masks are its own: without a sliding window, a square one (as many
    queries as keys) is ``causal_mask(seq_q, seq)``, the first query at position 0,
    which ``is_causal=True`` applies without a mask.
    """

    groups_heads = True  # the kernel takes them as they are; the fallback splits them

    def __init__(self, core: Core, *, square_is_causal: bool) -> None:
        self.core, self.square_is_causal = core, square_is_causal
        self.name = core.name
        self.returns_weights = core.returns_weights
        self.takes_value_terms = core.takes_value_terms

    def causal_prompt(self, queries, keys, values, mask, bias, dropout, value_term):
        """Whether this call is a prompt from position 0 that the kernel computes."""
        seq_q = queries.shape[-2]
        return (
            self.square_is_causal
            and value_term is None and bias is None and dropout == 0.0
            and mask is not None and seq_q > 1
            and mask.shape[-2:] == (seq_q, seq_q) == keys.shape[-2:-1] * 2
            and queries.ndim == keys.ndim == values.ndim == 4
            and queries.dtype == keys.dtype == values.dtype
            and keys.shape[0] == queries.shape[0]
        )  # fmt: skip

    def __call__(self, queries, keys, values, mask, bias, dropout, value_term=None):
        if self.causal_prompt(queries, keys, values, mask, bias, dropout, value_term):
            outputs = F.scaled_dot_product_attention(  # allow-raw: the fused kernel
                queries, keys, values, is_causal=True,
                enable_gqa=keys.shape[-3] != queries.shape[-3],
            )  # fmt: skip
            return outputs, None
        return _attention_by_core(
            self.core, Heads(queries, keys, values), mask, bias, dropout, value_term
        )


@functools.lru_cache(maxsize=4)  # a prompt's step uses three: n, n - 1, 1 positions
def _rotation_tables(
    seq: int, key: int, offset: int, base: float, dtype: torch.dtype, device
) -> tuple[Tensor, Tensor]:
    r"""$\cos\Phi$ and $\sin\Phi$ for ``seq`` positions from ``offset``, computed
    as :func:`~named_transformer.models.rotary.rotate_heads` computes them (in
    inference mode, as every decoder step runs)."""
    angles = rotary_angles(
        seq, key, offset=offset, base=base,
        dtype=torch.promote_types(dtype, torch.float32), device=device,
    )  # fmt: skip
    return angles.cos().to(dtype), angles.sin().to(dtype)


class _StepRotary(Positions):
    r"""Rotary positions for a cached step: the same rotation $R$, its tables shared.

    Every layer rotates its queries and keys at the same positions, so $\cos\Phi$
    and $\sin\Phi$ are computed once per step (:func:`_rotation_tables`), not twice
    per layer, and each half of $R(X)$ is written in place into one result instead
    of being stacked afterwards (the same products and sums): SmolLM2's 256-token
    prefill took about 3% less time (an interleaved A/B). A tensor offset (the
    compiled step) is rotated by the scheme itself.
    """

    takes_tensor_offset = True

    def __init__(self, rotary: Rotary) -> None:
        self.rotary, self.name = rotary, rotary.name

    def rotate(self, heads: Tensor, offset: int | Tensor) -> Tensor:
        if isinstance(offset, Tensor):
            return self.rotary.rotate(heads, offset)
        seq, key = heads.shape[-2:]
        cos, sin = _rotation_tables(
            seq, key, offset, self.rotary.base, heads.dtype, heads.device
        )
        first, second = heads[..., : key // 2], heads[..., key // 2 :]
        rotated = torch.empty_like(heads, memory_format=torch.contiguous_format)
        rotated_first, rotated_second = (
            rotated[..., : key // 2], rotated[..., key // 2 :]
        )  # fmt: skip
        # rounded as the scheme rounds: each product, then their sum
        torch.mul(first, cos, out=rotated_first).sub_(second * sin)  # X1 cos - X2 sin
        torch.mul(second, cos, out=rotated_second).add_(first * sin)  # X2 cos + X1 sin
        return rotated


def _prompt_variant(variant: AttentionVariant, window: int | None) -> AttentionVariant:
    """``variant`` with a materialising or automatic core computed by
    :class:`_PromptCore` (any other core, chosen explicitly, runs as it is) and
    rotary positions by :class:`_StepRotary`."""
    if type(variant.positions) is Rotary:
        variant = variant._replace(positions=_StepRotary(variant.positions))
    if type(variant.core) not in (Automatic, Materialise):
        return variant
    core = _PromptCore(variant.core, square_is_causal=window is None)
    return variant._replace(core=core)


def _grow(buffer: Tensor | None, length: int, new: Tensor) -> Tensor:
    """Write ``new`` positions after the first ``length`` of a ``batch heads seq key``
    buffer.

    The buffer has room to spare (its capacity doubles when full), so a step writes only
    its own keys and values instead of copying the whole cache into a longer tensor.
    """
    needed = length + new.shape[-2]
    if buffer is None or needed > buffer.shape[-2]:
        larger = new.new_empty(*new.shape[:-2], max(2 * needed, 16), new.shape[-1])
        if buffer is not None:
            larger[..., :length, :] = buffer[..., :length, :]
        buffer = larger
    buffer[..., length:needed, :] = new
    return buffer


def _slide(
    buffer: Tensor | None, length: int, new: Tensor, keep: int
) -> tuple[Tensor, int]:
    """:func:`_grow` under a sliding window, where only the last ``keep`` of the first
    ``length`` positions can still be attended.

    When the buffer is full, or far larger than the window needs (after a long
    prompt), those ``keep`` positions move to the front of a fresh buffer sized by the
    window: memory stays bounded by it, and the copy is paid once per ~window steps.
    Returns the buffer and the number of positions dropped from its front.
    """
    steps, kept = new.shape[-2], min(length, keep)
    room = max(2 * (kept + steps), 16)
    if buffer is not None and length + steps <= buffer.shape[-2] <= 2 * room:
        buffer[..., length : length + steps, :] = new
        return buffer, 0
    fresh = new.new_empty(*new.shape[:-2], room, new.shape[-1])
    if kept:
        fresh[..., :kept, :] = buffer[..., length - kept : length, :]
    fresh[..., kept : kept + steps, :] = new
    return fresh, length - kept


# --8<-- [start:plan]
class _Norm:
    """A LayerNorm's or RMSNorm's equation with the module's weights, called without
    the module (its dispatch costs as much as the arithmetic on one token)."""

    def __init__(self, module: LayerNorm | RMSNorm) -> None:
        self.rms = isinstance(module, RMSNorm)
        self.gamma, self.eps = module.gamma, module.eps
        self.beta = None if self.rms else module.beta

    def __call__(self, inputs: Tensor) -> Tensor:
        if self.rms:
            return rms_norm(inputs, self.gamma, self.eps)
        return layer_norm(inputs, self.gamma, self.beta, self.eps)


class _Residual:
    """:class:`~named_transformer.models.sublayers.Residual` without dropout (an
    evaluating model drops nothing), its norm called as an equation."""

    def __init__(self, residual: Residual) -> None:
        self.norm = None if residual.norm is None else _Norm(residual.norm)
        self.norm_first = residual.norm_first

    def sublayer_inputs(self, inputs: Tensor) -> Tensor:
        """What the sublayer reads: the normed inputs (pre-norm) or the inputs."""
        pre_norm = self.norm is not None and self.norm_first
        return self.norm(inputs) if pre_norm else inputs

    def __call__(self, inputs: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        outputs = inputs + sublayer(self.sublayer_inputs(inputs))
        return outputs if self.norm is None or self.norm_first else self.norm(outputs)


class _FeedForward:
    """A plain or gated feed-forward module's equation with its weights (no dropout:
    an evaluating model drops nothing)."""

    def __init__(self, module: FeedForward | GatedFeedForward) -> None:
        self.activation = ACTIVATIONS[module.activation]
        self.gated = isinstance(module, GatedFeedForward)
        if self.gated:
            self.weights = (module.w_gate, module.w_up, module.w_down,
                            module.b_gate, module.b_up, module.b_down)  # fmt: skip
        else:
            self.weights = (module.w1, module.b1, module.w2, module.b2)

    def __call__(self, inputs: Tensor) -> Tensor:
        if self.gated:
            return gated_feed_forward(inputs, *self.weights, self.activation)
        return feed_forward(inputs, *self.weights, self.activation)


@dataclass
class _LayerPlan:
    """What one layer's cached step calls, read once per decoding: each residual
    sublayer and the feed-forward (as equations with their weights, or the modules
    themselves), each attention's variant."""

    residuals: dict[str, Callable[[Tensor, Callable[[Tensor], Tensor]], Tensor]]
    feed_forward: Callable[[Tensor], Tensor] | None  # None: attention only
    variant: AttentionVariant
    cross_variant: AttentionVariant | None

    @classmethod
    def of(
        cls, layer: nn.Module, *, direct: bool, window: int | None = None
    ) -> _LayerPlan:
        """The plan of ``layer``: its modules' equations called directly where
        ``direct`` and the module is exactly a kind known here (a subclass may
        compute something else), and its self-attention's prompts from position 0
        by the fused kernel (:class:`_PromptCore`; ``window``: the decoder's
        sliding window, None: none); else the modules."""
        residuals = {}
        for name in _RESIDUALS:
            residual = getattr(layer, name, None)
            if residual is None:
                continue
            known = type(residual) is Residual and type(residual.norm) in _NORMS
            residuals[name] = _Residual(residual) if direct and known else residual
        feed_forward = layer.feed_forward
        if direct and type(feed_forward) in _FEED_FORWARDS:
            feed_forward = _FeedForward(feed_forward)
        cross = getattr(layer, "cross_attention", None)
        variant = layer.self_attention.variant()
        return cls(
            residuals, feed_forward,
            _prompt_variant(variant, window) if direct else variant,
            None if cross is None else cross.variant(),
        )  # fmt: skip


_RESIDUALS = ("attention_residual", "self_attention_residual",
              "cross_attention_residual", "feed_forward_residual")  # fmt: skip
_NORMS = (LayerNorm, RMSNorm, type(None))
_FEED_FORWARDS = (FeedForward, GatedFeedForward)


# --8<-- [end:plan]


# --8<-- [start:IncrementalDecoder]
class IncrementalDecoder:
    r"""Next-token log-probabilities for a growing prefix, with or without a key/value
    cache.

    Works for :class:`~named_transformer.models.transformer.Transformer` (pass
    ``source`` and ``source_mask``; the memory is encoded once) and for
    :class:`~named_transformer.models.language_model.LanguageModel` (no source).
    Self-attention modules may carry any position scheme (relative, rotary: the new
    keys are cached already rotated at their own positions; ALiBi) and any core:
    each step runs the module's own pipeline. Call it with
    the whole prefix so far; with ``cache=True`` only the positions not yet seen are
    computed. :meth:`select` keeps (and repeats) rows, for beam search.

    The cache holds each self-attention's keys and values with the module's own
    ``kv_heads``: grouped-query attention shrinks it by $|\mathsf{heads}| /
    |\mathsf{kv\_heads}|$ (:meth:`cache_bytes` measures it). With the model's
    ``config.window`` set, it keeps only the last ``window`` - 1 positions before the
    new ones (a sliding window: memory bounded by the window, however long the
    decoding).

    It works under ``torch.inference_mode``: decoding never needs a gradient, and each
    tiny step then skips autograd's bookkeeping. The log-probabilities it returns cannot
    enter a graph that is differentiated later.
    """

    @torch.inference_mode()
    def __init__(
        self,
        model: nn.Module,
        source: Tensor | None = None,
        source_mask: Tensor | None = None,
        *,
        cache: bool = True,
    ) -> None:
        self.model, self.use_cache = model, cache
        self.encoder_decoder = hasattr(model, "encode")
        self.embedding = (
            model.target_embedding if self.encoder_decoder else model.embedding
        )
        if self.encoder_decoder and source is None:
            raise ValueError("an encoder-decoder model needs the source to decode from")
        self.source_mask = source_mask
        self.memory = (
            model.encode(source, source_mask) if self.encoder_decoder else None
        )
        layers = (
            model.stacks.decoder.layers if self.encoder_decoder else model.blocks.layers
        )
        self.layers = list(layers)
        self.caches = [_LayerCache() for _ in self.layers]
        self.length = 0
        self.window = getattr(getattr(model, "config", None), "window", None)
        self.plans = [
            _LayerPlan.of(layer, direct=True, window=self.window)
            for layer in self.layers
        ]
        if cache:
            for layer, entry in zip(self.layers, self.caches, strict=True):
                _stacked_weights(layer.self_attention, entry)
        if cache and self.encoder_decoder:
            for layer, entry in zip(self.layers, self.caches, strict=True):
                attention = layer.cross_attention
                entry.memory_keys = project_heads(
                    self.memory, attention.w_k, attention.b_k
                )
                entry.memory_values = project_heads(
                    self.memory, attention.w_v, attention.b_v
                )

    @torch.inference_mode()
    def select(self, rows: Tensor) -> None:
        """Keep rows ``rows`` of every cached tensor (and of the memory)."""
        if self.memory is not None:
            self.memory = self.memory[rows]
        if self.source_mask is not None:
            self.source_mask = self.source_mask[rows]
        for entry in self.caches:
            for name in ("keys", "values", "memory_keys", "memory_values"):
                value = getattr(entry, name)
                if value is not None:
                    setattr(entry, name, value[rows])

    # --8<-- [start:cache_bytes]
    def cache_bytes(self, *, allocated: bool = False) -> int:
        """Bytes of the self-attention keys and values cached, over all layers.

        By default, those of the positions later steps still attend to: every position
        seen, or the last ``window`` - 1 under a sliding window. Per position that is
        layers × batch × kv_heads × (key + val) × the element size: grouped-query
        attention divides it by heads / kv_heads. ``allocated=True`` counts the buffers
        instead (spare room, and positions that left the window, included): the memory
        held. The cross-attention's keys and values of the source are not counted.
        """
        held = self.length if self.window is None else min(self.length, self.window - 1)
        total = 0
        for entry in self.caches:
            for buffer in (entry.keys, entry.values):
                if buffer is not None:
                    per_position = buffer.nbytes // buffer.shape[-2]
                    total += buffer.nbytes if allocated else held * per_position
        return total

    # --8<-- [end:cache_bytes]

    @torch.inference_mode()
    def __call__(self, tokens: Tensor) -> Tensor:
        """Log-probabilities (``batch vocab``) of the token after ``tokens``
        (``batch seq``)."""
        if not self.use_cache:
            if self.encoder_decoder:
                return self.model.decode(tokens, self.memory, self.source_mask)[:, -1]
            return self.model(tokens)[:, -1]
        new = tokens[:, self.length :]
        log_probs = self._step(new, self.length)
        self.length = tokens.shape[-1]
        return log_probs[:, -1]

    def _step(self, new: Tensor, offset: int) -> Tensor:
        hidden = self.model.positions(self.embedding(new), offset)
        seq_q = new.shape[-1]
        # one new token may see every cached position and itself: no mask to apply
        mask = (
            None
            if seq_q == 1
            else causal_mask(seq_q, offset + seq_q, offset=offset, device=new.device)
        )
        return self._layers_and_output(hidden, mask, offset)

    def _layers_and_output(self, hidden: Tensor, mask: Tensor | None, offset) -> Tensor:
        # the modules' own forward while the model trains (dropout) or a recording
        # or edit is open (their taps); else their equations, called directly
        direct = not self.model.training and tapping() is None
        plans = self.plans if direct else [None] * len(self.layers)
        # only the last position's log-probabilities are asked for (the token after
        # the prefix): a prompt's other positions skip the final norm and the
        # generator, whose vocabulary-wide product is a fifth of SmolLM2's prefill,
        # and all of the last layer but its keys and values, which later steps
        # attend: those are written first, then the last position goes through alone
        last = len(self.layers) - 1
        steps = zip(self.layers, plans, self.caches, strict=True)
        for index, (layer, plan, entry) in enumerate(steps):
            if index == last:
                hidden, mask, offset = self._last_position_apart(
                    layer, plan, entry, hidden, mask, offset
                )
            hidden = self._layer(layer, plan, entry, hidden, mask, offset)
        hidden = hidden[:, -1:]
        stack = self.model.stacks.decoder if self.encoder_decoder else self.model.blocks
        if stack.norm is not None:
            hidden = stack.norm(hidden)
        return self.model.generator(hidden)

    def _remember(
        self,
        entry: _LayerCache,
        keys: Tensor,
        values: Tensor,
        offset: int,
        mask: Tensor | None,
    ):
        """Store the new keys and values; return every position seen so far and the mask
        over them."""
        if self.window is not None:
            return self._remember_window(entry, keys, values, offset)
        entry.keys, entry.values = (
            _grow(entry.keys, offset, keys),
            _grow(entry.values, offset, values),
        )
        seen = offset + keys.shape[-2]
        return entry.keys[..., :seen, :], entry.values[..., :seen, :], mask

    # --8<-- [start:remember_window]
    def _remember_window(
        self, entry: _LayerCache, keys: Tensor, values: Tensor, offset: int
    ):
        """Store the new keys and values after the last ``window`` - 1 positions; return
        the positions the new queries may see and the sliding window over them.

        Buffer slot $s$ holds absolute position ``entry.start`` + $s$. The first new
        query, at ``offset``, sees the positions after ``offset`` - ``window``: the
        slots from ``first`` on. One new token sees all of them, so needs no mask.
        """
        window, steps = self.window, keys.shape[-2]
        length = offset - entry.start  # positions in the buffers before this step
        entry.keys, dropped = _slide(entry.keys, length, keys, window - 1)
        entry.values, _ = _slide(entry.values, length, values, window - 1)
        entry.start, length = entry.start + dropped, length - dropped
        first = max(0, length - (window - 1))
        entry.first = entry.start + first
        seen = length + steps
        mask = None
        if steps > 1:
            mask = sliding_window_mask(
                steps, seen - first, window=window, offset=length - first,
                device=keys.device,
            )  # fmt: skip
        return entry.keys[..., first:seen, :], entry.values[..., first:seen, :], mask

    # --8<-- [end:remember_window]

    def _self_attention_inputs(
        self, layer, plan: _LayerPlan, entry: _LayerCache, x: Tensor, offset,
        mask: Tensor | None = None,
    ) -> tuple[Heads, Tensor | None]:  # fmt: skip
        """The new positions' queries, and every key and value they see (the new ones
        stored), with the mask over them."""
        attention = layer.self_attention
        if entry.w_qkv is None:
            heads = project_qkv(x, x, attention.named_weights())
        else:
            heads = Heads(*stacked_projection(
                x, entry.w_qkv, attention.heads, entry.b_qkv,
                kv_heads=attention.kv_heads,
            ))  # fmt: skip
        # new queries and keys both sit at offset...: the cache keeps the keys
        # transformed (rotated) at their own positions
        queries = plan.variant.positions.rotate(heads.queries, offset)
        keys, values, seen_mask = self._remember(
            entry, plan.variant.positions.rotate(heads.keys, offset), heads.values,
            offset, mask,
        )  # fmt: skip
        return Heads(queries, keys, values), seen_mask

    def _last_position_apart(
        self, layer, plan: _LayerPlan | None, entry: _LayerCache, hidden: Tensor,
        mask: Tensor | None, offset,
    ) -> tuple[Tensor, Tensor | None, int | Tensor]:  # fmt: skip
        """Write the last layer's keys and values of a prompt's positions but the
        last; return the last position, its mask (none) and offset. Anything else
        (one position, a position as a tensor, the modules' own forward) is
        returned as it is."""
        name = "self_attention" if self.encoder_decoder else "attention"
        residual = None if plan is None else plan.residuals[f"{name}_residual"]
        apart = hidden.shape[-2] > 1 and isinstance(offset, int)
        if not apart or not isinstance(residual, _Residual):
            return hidden, mask, offset
        earlier = residual.sublayer_inputs(hidden[:, :-1])
        self._self_attention_inputs(layer, plan, entry, earlier, offset)
        return hidden[:, -1:], None, offset + hidden.shape[-2] - 1

    def _layer(self, layer, plan: _LayerPlan | None, entry: _LayerCache, hidden, mask,
               offset):  # fmt: skip
        """One layer's cached step: the plan's equations, or the modules (None)."""
        attention = layer.self_attention
        if plan is None:
            plan = _LayerPlan.of(layer, direct=False)

        def self_attend(x: Tensor) -> Tensor:
            heads, seen_mask = self._self_attention_inputs(
                layer, plan, entry, x, offset, mask
            )
            # the queries' position counted from the first key they see (the window's)
            return _cached_attention(
                attention, heads, seen_mask, plan.variant, offset - entry.first
            )

        def cross_attend(x: Tensor) -> Tensor:
            cross = layer.cross_attention
            queries = project_heads(x, cross.w_q, cross.b_q)
            heads = Heads(queries, entry.memory_keys, entry.memory_values)
            return _cached_attention(
                cross, heads, self.source_mask, plan.cross_variant, 0
            )

        residuals = plan.residuals
        if self.encoder_decoder:
            hidden = residuals["self_attention_residual"](hidden, self_attend)
            hidden = residuals["cross_attention_residual"](hidden, cross_attend)
        else:
            hidden = residuals["attention_residual"](hidden, self_attend)
        if plan.feed_forward is None:  # an attention-only block
            return hidden
        return residuals["feed_forward_residual"](hidden, plan.feed_forward)


# --8<-- [end:IncrementalDecoder]
