r"""One cached decoding step of causal multi-head self-attention, as an equation.

At step $j$ the keys and values of the positions before $j$ are in the cache: the
causal mask stopped them from changing when later tokens came. The new positions
(usually one token) are projected once, their keys and values appended to the cache,
and their queries attend everything so far. The
:class:`~named_transformer.decoding.incremental.IncrementalDecoder` does the same
with a stacked $W_{qkv}$ and buffers with room to spare.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from named_transformer.axes import checked
from named_transformer.core.masks import causal_mask
from named_transformer.models.multihead import Heads, attend_projected, project_heads

__all__ = ["cached_self_attention"]


# --8<-- [start:cached_self_attention]
@checked
def cached_self_attention(
    inputs: Float[Tensor, "*batch seq_q layer"],
    cached_keys: Float[Tensor, "*batch heads seq key"],
    cached_values: Float[Tensor, "*batch heads seq val"],
    w_q: Float[Tensor, "heads layer key"],
    w_k: Float[Tensor, "heads layer key"],
    w_v: Float[Tensor, "heads layer val"],
    w_o: Float[Tensor, "heads val layer"],
) -> tuple[
    Float[Tensor, "*batch seq_q layer"],
    Float[Tensor, "*batch heads seq_q key"],
    Float[Tensor, "*batch heads seq_q val"],
]:
    r"""One step: the new positions $X$ attend the cache and themselves.

    $$K = \big[K_{\text{cache}};\ W^K \ndot{layer} X\big]_{\mathsf{seq}}, \quad
      V = \big[V_{\text{cache}};\ W^V \ndot{layer} X\big]_{\mathsf{seq}},$$

    $$Y = W^O \ndot{heads, val}
      \text{Attention}\left(W^Q \ndot{layer} X,\ K,\ V,\ M_c\right),$$

    where $M_c$ is the causal mask whose first query sits at position $c$, the
    cache's length (``causal_mask(..., offset=c)``). Returns $Y$ and the new
    positions' keys and values, which the caller appends to its cache. An empty cache
    ($c = 0$) is the first step.
    """
    queries = project_heads(inputs, w_q)
    new_keys, new_values = project_heads(inputs, w_k), project_heads(inputs, w_v)
    seen, new = cached_keys.shape[-2], inputs.shape[-2]
    keys = torch.cat([cached_keys, new_keys], dim=-2)  # allow-raw: append along seq
    values = torch.cat([cached_values, new_values], dim=-2)  # allow-raw: as keys
    mask = causal_mask(new, seen + new, offset=seen, device=inputs.device)
    outputs, _ = attend_projected(Heads(queries, keys, values), w_o, None, mask)
    return outputs, new_keys, new_values


# --8<-- [end:cached_self_attention]
