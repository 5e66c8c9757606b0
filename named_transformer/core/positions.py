r"""Where is each token? Sinusoidal positions and clipped relative distances.

Attention is permutation equivariant, so order must be added to the inputs. The
Transformer adds a fixed table (0-based position $p$, channel pair $c$):

$$P_{\mathsf{seq}(p),\,\mathsf{layer}(2c)}
  = \sin\frac{p}{10000^{2c/|\mathsf{layer}|}}, \qquad
  P_{\mathsf{seq}(p),\,\mathsf{layer}(2c+1)}
  = \cos\frac{p}{10000^{2c/|\mathsf{layer}|}}.$$

Each channel pair rotates at its own frequency, so for a fixed offset $k$, $P_{p+k}$ is
a linear (rotation) function of $P_p$.

Shaw et al. (2018) instead look up a learned vector by the clipped distance between a
query at position $j$ and a key at position $i$:
$\operatorname{clip}(i - j, k) = \max(-k, \min(k, i - j))$, stored as an index
$0 \dots 2k$ into a table with a $\mathsf{distance}$ axis of $2k+1$ entries.
"""

from __future__ import annotations

import torch
from einops import rearrange
from jaxtyping import Float, Int
from torch import Tensor

from named_transformer.axes import checked

__all__ = ["relative_position_index", "sinusoidal_positions"]


# --8<-- [start:sinusoidal_positions]
@checked
def sinusoidal_positions(
    seq: int,
    layer: int,
    *,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Float[Tensor, "seq layer"]:
    r"""The table $P \in \mathbb R^{\mathsf{seq} \times \mathsf{layer}}$ for positions
    ``offset`` … ``offset + seq - 1``."""
    positions = torch.arange(offset, offset + seq, dtype=dtype, device=device)
    channels = torch.arange(layer, device=device)
    even_channel = channels - channels % 2  # 2c for both channels of pair c
    frequencies = 10000.0 ** (-even_channel.to(dtype) / layer)
    angles = rearrange(positions, "seq -> seq 1") * rearrange(
        frequencies, "layer -> 1 layer"
    )
    return torch.where(channels % 2 == 0, angles.sin(), angles.cos())


# --8<-- [end:sinusoidal_positions]


# --8<-- [start:relative_position_index]
@checked
def relative_position_index(
    seq_q: int,
    seq: int,
    max_distance: int,
    *,
    offset: int = 0,
    device: torch.device | str | None = None,
) -> Int[Tensor, "seq_q seq"]:
    r"""$\operatorname{clip}(i - j, k) + k$ for the key at position $i$ and the
    query at position $j$ = ``offset`` plus its index.

    Query and key lengths may differ: in cross-attention, or in cached decoding, where
    the new queries start at ``offset`` = the cache length.
    """
    if max_distance < 0:
        raise ValueError(
            f"max_distance (the clipping distance k) must be >= 0, got {max_distance}"
        )
    queries = torch.arange(offset, offset + seq_q, device=device)
    keys = torch.arange(seq, device=device)
    distance = rearrange(keys, "seq -> 1 seq") - rearrange(queries, "seq_q -> seq_q 1")
    return distance.clamp(-max_distance, max_distance) + max_distance


# --8<-- [end:relative_position_index]
