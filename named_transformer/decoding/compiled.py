r"""Cached decoding compiled by ``torch.compile``, over a cache of fixed size.

A cached step (:class:`~named_transformer.decoding.incremental.IncrementalDecoder`)
does little arithmetic on one token: its time goes to the hundreds of small operations
around it, which a compiler can fuse away. A compiler wants the same shapes at every
step, though, and the cache grows by one position per step. So this decoder keeps room
for ``capacity`` positions from the start and attends over all of them, masking the
slots not yet written. With the new token (the query) at position $j$, the
self-attention mask over the slots $i$ of $\mathsf{seq}$ is

$$M_i = \begin{cases} 0 & i \le j \\ -\infty & i > j \end{cases}
\qquad \text{Attention}(Q, K, V, M) = \nfun{seq}{softmax}
  \left(\frac{Q \ndot{key} K}{\sqrt{|\mathsf{key}|}} + M\right) \ndot{seq} V,$$

which gives every slot after $j$ the weight 0: the same output as attending over the
$j + 1$ positions seen (a test checks it). The position $j$ enters the step as a tensor,
not as a Python number, so one compiled graph serves every position.

A prompt goes eagerly, in one pass, all its tokens at once: each query $j$ of the
prompt sees the slots $i \le j$ written so far, one product per weight for the whole
prompt instead of one compiled step per token; from position 0 its attention is the
causal rule, which PyTorch's fused kernel applies (the cached decoder's prompt core).
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor, nn

from named_transformer.axes import shape_checks
from named_transformer.decoding.incremental import IncrementalDecoder, _LayerCache
from named_transformer.models.embedding import add_positions

__all__ = ["CompiledDecoder"]


# --8<-- [start:CompiledDecoder]
class CompiledDecoder(IncrementalDecoder):
    r"""An :class:`~named_transformer.decoding.incremental.IncrementalDecoder` whose
    one-token step is compiled.

    Room for ``capacity`` positions (prompt and generated tokens together) is kept from
    the start. The first call compiles the step (tens of seconds with the default
    ``backend="inductor"``); later calls, and later decoders of the same model, batch
    size and capacity, reuse it. A new batch size or capacity compiles again
    (``torch.compile`` keeps up to 8 versions of one function). The compiled step runs
    with shape checks off: they cannot run inside a compiled graph. Several new tokens
    (a prompt) go eagerly, in one pass, before the compiled step takes one token at a
    time. The model must be in eval mode
    (its position table is read once). Its self-attention's position part must take
    the position as a tensor (``Positions.takes_tensor_offset``): none, rotary and
    ALiBi do; relative positions are refused (their table lookup needs the position
    as a Python number). Grouped-query attention
    keeps ``kv_heads`` heads in the buffers; a sliding window (``config.window``) is
    applied by the mask, the buffers staying capacity-sized.
    """

    def __init__(
        self,
        model: nn.Module,
        source: Tensor | None = None,
        source_mask: Tensor | None = None,
        *,
        capacity: int,
        backend: str = "inductor",
    ) -> None:
        if model.training:
            raise ValueError(
                "call model.eval() first: "
                "the compiled step reads the position table once"
            )
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        super().__init__(model, source, source_mask, cache=True)
        for layer in self.layers:
            part = layer.self_attention.position_scheme()
            if not part.takes_tensor_offset:
                raise ValueError(
                    f"CompiledDecoder cannot compile {part.name} positions (they need "
                    "the position as a Python number): decode with IncrementalDecoder"
                )
        self.capacity = capacity
        table = self.embedding.table  # gives the model's dtype, device and width
        self.slots = torch.arange(capacity, device=table.device)
        # P for every slot: the position module applied to zeros
        with torch.inference_mode():
            self.position_table = model.positions(
                table.new_zeros(1, capacity, table.shape[-1])
            )[0]
        self._compiled = torch.compile(
            self._step_at, fullgraph=True, dynamic=False, backend=backend
        )

    def _allocate(self, batch: int) -> None:
        table = self.embedding.table
        for layer, entry in zip(self.layers, self.caches, strict=True):
            attention = layer.self_attention
            heads, key, val = (  # the key/value heads: fewer under grouped-query
                attention.w_k.shape[0],
                attention.w_k.shape[-1],
                attention.w_v.shape[-1],
            )
            # zeros: finite where masked
            entry.keys = table.new_zeros(batch, heads, self.capacity, key)
            entry.values = table.new_zeros(batch, heads, self.capacity, val)

    @torch.inference_mode()
    def __call__(self, tokens: Tensor) -> Tensor:
        """Log-probabilities (``batch vocab``) of the token after ``tokens``
        (``batch seq``)."""
        if tokens.shape[-1] > self.capacity:
            raise ValueError(
                f"{tokens.shape[-1]} positions do not fit "
                f"the cache's capacity of {self.capacity}"
            )
        if self.caches[0].keys is None:
            self._allocate(tokens.shape[0])
        new = tokens[:, self.length :]
        first = torch.tensor([self.length], device=tokens.device)
        if new.shape[-1] > 1 and self.window is None:  # a prompt: eagerly, one pass
            log_probs = self._step(new, self.length)
        elif new.shape[-1] > 1:  # under a sliding window: over every slot, eagerly
            log_probs = self._step_at(new, first)
        else:
            # a fresh copy: a slice of tokens would have strides that change every step
            new = new.clone(memory_format=torch.contiguous_format)
            with shape_checks(False):
                log_probs = self._compiled(new, first)
        self.length = tokens.shape[-1]
        return log_probs[:, -1]

    def _step_at(self, new: Tensor, first: Tensor) -> Tensor:
        """The step of the tokens ``new`` from position ``first`` (a tensor of one
        element): one token, the same shapes at every position, when compiled."""
        positions = _positions(first, new.shape[-1])
        hidden = add_positions(
            self.embedding(new), self.position_table.index_select(0, positions)
        )
        return self._layers_and_output(hidden, None, first)

    def _remember(
        self,
        entry: _LayerCache,
        keys: Tensor,
        values: Tensor,
        first: Tensor | int,
        mask: Tensor | None,
    ):
        """Write the slots from ``first`` on of the fixed buffers. A prompt (``first``
        a number, no sliding window) attends the slots seen so far under its causal
        ``mask``, as the eager cache does (its buffers have room); a step (``first`` a
        tensor) attends over every slot, each query masking those after its own (and,
        under a sliding window, those before the window)."""
        if not isinstance(first, Tensor):
            return super()._remember(entry, keys, values, first, mask)
        written = _positions(first, keys.shape[-2])
        entry.keys.index_copy_(  # allow-raw: write the new slots of seq in place
            -2, written, keys
        )
        entry.values.index_copy_(  # allow-raw: write the new slots of seq in place
            -2, written, values
        )
        query = rearrange(written, "seq_q -> seq_q 1")
        seen = self.slots <= query
        if self.window is not None:  # the buffers stay capacity-sized
            seen = seen & (self.slots > query - self.window)
        return entry.keys, entry.values, seen


def _positions(first: Tensor, count: int) -> Tensor:
    """``count`` positions from ``first`` (a tensor of one element) on."""
    return first + torch.arange(count, device=first.device)


# --8<-- [end:CompiledDecoder]
