r"""Rotary positions (RoPE; Su et al. 2021, "RoFormer"): rotate queries and keys.

Instead of adding a position table to the inputs, RoPE *rotates* each query and each
key by an angle proportional to its position, after the projections. The key axis is
cut into $|\mathsf{pairs}| = |\mathsf{key}|/2$ pairs of channels; pair $i$ turns at
the frequency

$$\theta_i = \frac{1}{\text{base}^{2i/|\mathsf{key}|}}, \qquad
  \Phi_{\mathsf{seq}(s),\,\mathsf{pairs}(i)} = s\,\theta_i,$$

so $\Phi \in \mathbb R^{\mathsf{seq} \times \mathsf{pairs}}$ holds the angle of every
pair at every position $s$ (base 10000, as the sinusoidal table). **Which channels
pair up** is a convention: here channel $i$ with channel $i + |\mathsf{key}|/2$, the
two *halves* of $\mathsf{key}$ (GPT-NeoX, Hugging Face Llama's ``rotate_half``), not
the neighbours $(2i, 2i+1)$ of RoFormer and GPT-J. The two are the same model up to a
fixed permutation of $W^Q$ and $W^K$, but a checkpoint only works with its own. With
$X = [X^{(1)}; X^{(2)}]$ split into halves
$X^{(1)}, X^{(2)} \in \mathbb R^{\mathsf{seq} \times \mathsf{pairs}}$, the rotation
$R(X)$ is element-wise:

$$R(X)^{(1)} = X^{(1)} \odot \cos\Phi - X^{(2)} \odot \sin\Phi, \qquad
  R(X)^{(2)} = X^{(2)} \odot \cos\Phi + X^{(1)} \odot \sin\Phi.$$

**Only the distance survives.** Read pair $i$ as the complex number
$z_i = x^{(1)}_i + \mathrm i\, x^{(2)}_i$: the rotation at position $s$ multiplies it
by $e^{\mathrm i s\theta_i}$, and a real dot product of two pairs is the real part of
one times the conjugate of the other. A query $q$ at position $s$ and a key $k$ at
position $t$ therefore score

$$R_s(q) \ndot{key} R_t(k)
  = \operatorname{Re} \sum_i z^q_i\, e^{\mathrm i s\theta_i}\,
    \overline{z^k_i\, e^{\mathrm i t\theta_i}}
  = \operatorname{Re} \sum_i z^q_i\, \overline{z^k_i}\,
    e^{-\mathrm i (t - s)\theta_i},$$

a function of $q$, $k$ and $t - s$ alone: shifting both positions changes nothing
(a test checks it). Nothing is learned, nothing is added to the values, and the
model's width is untouched.
"""

from __future__ import annotations

import torch
from einops import rearrange
from jaxtyping import Float, Int, TypeCheckError
from torch import Tensor

from named_transformer.axes import checked

__all__ = ["rotary_angles", "rotary_frequencies", "rotate"]


def _even(key: int) -> None:
    if key <= 0 or key % 2 != 0:
        raise ValueError(
            f"rotary positions rotate pairs of channels of the key axis: |key| must be "
            f"even and positive, got {key}"
        )


# --8<-- [start:rotary_frequencies]
@checked
def rotary_frequencies(
    key: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Float[Tensor, " pairs"]:
    r"""$\theta_i = 1/\text{base}^{2i/|\mathsf{key}|}$ for the pairs
    $i = 0 \dots |\mathsf{key}|/2 - 1$: from one radian per position ($i = 0$)
    down to almost $1/\text{base}$, a wavelength of nearly $2\pi \cdot \text{base}$
    positions."""
    _even(key)
    exponents = torch.arange(0, key, 2, dtype=dtype, device=device) / key  # 2i/|key|
    return 1.0 / base**exponents


# --8<-- [end:rotary_frequencies]


# --8<-- [start:rotary_angles]
@checked
def rotary_angles(
    seq: int,
    key: int,
    *,
    offset: int | Int[Tensor, " 1"] = 0,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Float[Tensor, "seq pairs"]:
    r"""$\Phi_{\mathsf{seq}(s),\,\mathsf{pairs}(i)} = s\,\theta_i$ for the positions
    $s$ = ``offset`` … ``offset + seq - 1``.

    ``offset`` is the first position: the cache length when decoding step by step (a
    one-element tensor in the compiled decoder, so one graph serves every step). Keep
    ``dtype`` at float32 or wider: in bfloat16 the positions past 256 are no longer
    integers.
    """
    frequencies = rotary_frequencies(key, base=base, dtype=dtype, device=device)
    positions = (offset + torch.arange(seq, device=device)).to(dtype)
    return rearrange(positions, "seq -> seq 1") * rearrange(
        frequencies, "pairs -> 1 pairs"
    )


# --8<-- [end:rotary_angles]


# --8<-- [start:rotate]
@checked
def rotate(
    inputs: Float[Tensor, "*batch seq key"],
    angles: Float[Tensor, "seq pairs"],
) -> Float[Tensor, "*batch seq key"]:
    r"""$R(X)$: turn pair $i$ $= (X^{(1)}_i, X^{(2)}_i)$, the channels $i$ and
    $i + |\mathsf{key}|/2$, by the angle $\Phi_{\mathsf{seq}, \mathsf{pairs}(i)}$.

    $$R(X)^{(1)} = X^{(1)} \odot \cos\Phi - X^{(2)} \odot \sin\Phi, \qquad
      R(X)^{(2)} = X^{(2)} \odot \cos\Phi + X^{(1)} \odot \sin\Phi.$$

    Lifted over every leading axis (batch, heads). The result has the dtype of
    ``inputs`` whatever the dtype of the angles.
    """
    _even(inputs.shape[-1])
    if 2 * angles.shape[-1] != inputs.shape[-1]:
        raise TypeCheckError(
            f"parameter 'angles' has {angles.shape[-1]} pairs (axis 'pairs') but "
            f"'inputs' has |key| = {inputs.shape[-1]}: RoPE needs |pairs| = |key|/2"
        )
    first, second = rearrange(
        inputs, "... seq (two pairs) -> two ... seq pairs", two=2
    )  # the halves: channel i pairs with channel i + |key|/2
    cos, sin = angles.cos().to(inputs.dtype), angles.sin().to(inputs.dtype)
    rotated = [first * cos - second * sin, second * cos + first * sin]
    return rearrange(rotated, "two ... seq pairs -> ... seq (two pairs)")


# --8<-- [end:rotate]
