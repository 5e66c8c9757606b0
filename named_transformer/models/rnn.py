r"""Recurrent cells in named notation: Elman (paper §4.2), GRU and LSTM as PyTorch
defines them.

A recurrent cell maps the previous state $h \in \mathbb R^{\mathsf{hidden}}$ and an
input $x \in \mathbb R^{\mathsf{input}}$ to the next state. The named tensor paper
(§4.2) writes the Elman network with a primed axis for the new state and renames it
back:

$$h^{t} = \tanh\left(W^h \ndot{hidden} h^{t-1} + W^i \ndot{input} x^t + b\right)
  _{\mathsf{hidden'}\to\mathsf{hidden}},$$

$W^h \in \mathbb R^{\mathsf{hidden'} \times \mathsf{hidden}}$,
$W^i \in \mathbb R^{\mathsf{hidden'} \times \mathsf{input}}$,
$b \in \mathbb R^{\mathsf{hidden'}}$. In code the rename is only an annotation: the
result is declared `hidden` again.

The gated cells stack their gates along a named axis $\mathsf{gates}$ exactly as
PyTorch stores them (``weight_ih`` is
$(\mathsf{gates}\cdot\mathsf{hidden'}) \times \mathsf{input}$ with gates in the order
r, z, n for the GRU and i, f, g, o for the LSTM), so the named weights
$W^i \in \mathbb R^{\mathsf{gates} \times \mathsf{hidden'} \times \mathsf{input}}$ are
PyTorch's with the gate axis split out. Every function is lifted over any leading
$\mathsf{batch}$ axes. Chai and dataflowr build the seq2seq encoder and decoder from
these cells (see :mod:`named_transformer.models.seq2seq`).
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from jaxtyping import Float
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.contraction import einsum

__all__ = ["ElmanCell", "GRUCell", "LSTMCell", "elman_cell", "gru_cell", "lstm_cell"]


def _split_gates(stacked: Tensor, count: int, cell: str) -> tuple[Tensor, ...]:
    """Unbind the ``gates`` axis (second from the end) into ``count`` tensors."""
    if stacked.shape[-2] != count:
        raise ValueError(f"{cell} needs {count} stacked gates, got {stacked.shape[-2]}")
    return tuple(rearrange(stacked, "... gates hidden -> gates ... hidden"))


# --8<-- [start:elman_cell]
@checked
def elman_cell(
    inputs: Float[Tensor, "*batch input"],
    state: Float[Tensor, "*batch hidden"],
    w_input: Float[Tensor, "hidden_next input"],
    w_hidden: Float[Tensor, "hidden_next hidden"],
    bias: Float[Tensor, " hidden_next"],
) -> Float[Tensor, "*batch hidden"]:
    r"""Elman RNN (paper §4.2): $\tanh(W^h \ndot{hidden} h + W^i \ndot{input} x + b)$.

    The result's axis $\mathsf{hidden'}$ is renamed to $\mathsf{hidden}$ (only in the
    annotation).

    Equals `torch.nn.RNNCell` with $b = b_{ih} + b_{hh}$ (PyTorch keeps two biases that
    only ever appear as a sum).
    """
    return torch.tanh(
        einsum(w_hidden, state, "hidden_next hidden, ... hidden -> ... hidden_next")
        + einsum(w_input, inputs, "hidden_next input, ... input -> ... hidden_next")
        + bias
    )


# --8<-- [end:elman_cell]


# --8<-- [start:gru_cell]
def _gates(
    inputs: Tensor,
    state: Tensor,
    w_input: Tensor,
    w_hidden: Tensor,
    b_input: Tensor,
    b_hidden: Tensor,
) -> tuple[Tensor, Tensor]:
    r"""$G^i = W^i \ndot{input} x + b^i$ and $G^h = W^h \ndot{hidden} h + b^h$, each
    ``... gates hidden_next``: what both gated cells (GRU, LSTM) read their gates
    from."""
    from_input = einsum(
        w_input, inputs, "gates hidden_next input, ... input -> ... gates hidden_next"
    )
    from_state = einsum(
        w_hidden, state, "gates hidden_next hidden, ... hidden -> ... gates hidden_next"
    )
    return from_input + b_input, from_state + b_hidden


@checked
def gru_cell(
    inputs: Float[Tensor, "*batch input"],
    state: Float[Tensor, "*batch hidden"],
    w_input: Float[Tensor, "gates hidden_next input"],
    w_hidden: Float[Tensor, "gates hidden_next hidden"],
    b_input: Float[Tensor, "gates hidden_next"],
    b_hidden: Float[Tensor, "gates hidden_next"],
) -> Float[Tensor, "*batch hidden"]:
    r"""GRU exactly as `torch.nn.GRUCell` (the reset gate acts *after* the hidden
    projection).

    With $G^i = W^i \ndot{input} x + b^i$ and $G^h = W^h \ndot{hidden} h + b^h$, both in
    $\mathbb R^{\mathsf{gates} \times \mathsf{hidden'}}$, gates $(r, z, n)$:

    $$\begin{gathered}
      r = \sigma(G^i_r + G^h_r),\quad z = \sigma(G^i_z + G^h_z),\\
      n = \tanh(G^i_n + r \odot G^h_n),\quad h' = (1 - z) \odot n + z \odot h.
    \end{gathered}$$

    Cho et al. (2014) put $r$ *before* the projection,
    $W^h_n \ndot{hidden} (r \odot h)$; PyTorch (and cuDNN) apply it after, which is
    what we match.
    """
    g_input, g_hidden = _gates(inputs, state, w_input, w_hidden, b_input, b_hidden)
    i_r, i_z, i_n = _split_gates(g_input, 3, "gru_cell")
    h_r, h_z, h_n = _split_gates(g_hidden, 3, "gru_cell")
    reset = torch.sigmoid(i_r + h_r)
    update = torch.sigmoid(i_z + h_z)
    candidate = torch.tanh(i_n + reset * h_n)
    return (1 - update) * candidate + update * state


# --8<-- [end:gru_cell]


# --8<-- [start:lstm_cell]
@checked
def lstm_cell(
    inputs: Float[Tensor, "*batch input"],
    state: Float[Tensor, "*batch hidden"],
    cell: Float[Tensor, "*batch hidden"],
    w_input: Float[Tensor, "gates hidden_next input"],
    w_hidden: Float[Tensor, "gates hidden_next hidden"],
    b_input: Float[Tensor, "gates hidden_next"],
    b_hidden: Float[Tensor, "gates hidden_next"],
) -> tuple[Float[Tensor, "*batch hidden"], Float[Tensor, "*batch hidden"]]:
    r"""LSTM exactly as `torch.nn.LSTMCell`; returns the new state and cell $(h', c')$.

    With gates $(i, f, g, o)$:

    $$G = W^i \ndot{input} x + b^i + W^h \ndot{hidden} h + b^h
      \in \mathbb R^{\mathsf{gates} \times \mathsf{hidden'}},$$

    $$c' = \sigma(G_f) \odot c + \sigma(G_i) \odot \tanh(G_g),\qquad
      h' = \sigma(G_o) \odot \tanh(c').$$
    """
    g_input, g_hidden = _gates(inputs, state, w_input, w_hidden, b_input, b_hidden)
    g_i, g_f, g_g, g_o = _split_gates(g_input + g_hidden, 4, "lstm_cell")
    cell_next = torch.sigmoid(g_f) * cell + torch.sigmoid(g_i) * torch.tanh(g_g)
    return torch.sigmoid(g_o) * torch.tanh(cell_next), cell_next


# --8<-- [end:lstm_cell]


def _check_positive(**sizes: int) -> None:
    """One line naming the first size that is not positive."""
    for name, size in sizes.items():
        if size < 1:
            raise ValueError(f"{name} must be a positive size, got {size}")


def _uniform(fan: int, *shape: int) -> nn.Parameter:
    """A weight or bias of ``shape`` drawn from U(-1/sqrt(fan), 1/sqrt(fan)): PyTorch's
    RNN cells (fan: the hidden size) and ``nn.Linear`` (fan: the inputs) alike."""
    bound = 1.0 / math.sqrt(fan)
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


# --8<-- [start:ElmanCell]
class ElmanCell(nn.Module):
    r"""Named Elman cell; weights $W^i$, $W^h$, $b$ as in :func:`elman_cell`."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        _check_positive(input_size=input_size, hidden_size=hidden_size)
        self.w_input = _uniform(hidden_size, hidden_size, input_size)
        self.w_hidden = _uniform(hidden_size, hidden_size, hidden_size)
        self.bias = _uniform(hidden_size, hidden_size)

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch input"],
        state: Float[Tensor, "*batch hidden"],
    ) -> Float[Tensor, "*batch hidden"]:
        return elman_cell(inputs, state, self.w_input, self.w_hidden, self.bias)


# --8<-- [end:ElmanCell]


class _GatedCell(nn.Module):
    """A cell whose ``gates`` stand stacked along the first axis of each weight,
    initialised as PyTorch does."""

    gates: int

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        _check_positive(input_size=input_size, hidden_size=hidden_size)
        self.w_input = _uniform(hidden_size, self.gates, hidden_size, input_size)
        self.w_hidden = _uniform(hidden_size, self.gates, hidden_size, hidden_size)
        self.b_input = _uniform(hidden_size, self.gates, hidden_size)
        self.b_hidden = _uniform(hidden_size, self.gates, hidden_size)


# --8<-- [start:GRUCell]
class GRUCell(_GatedCell):
    r"""Named GRU cell with three stacked gates (r, z, n), as in :func:`gru_cell`."""

    gates = 3

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch input"],
        state: Float[Tensor, "*batch hidden"],
    ) -> Float[Tensor, "*batch hidden"]:
        return gru_cell(
            inputs, state, self.w_input, self.w_hidden, self.b_input, self.b_hidden
        )


# --8<-- [end:GRUCell]


# --8<-- [start:LSTMCell]
class LSTMCell(_GatedCell):
    r"""Named LSTM cell with four stacked gates (i, f, g, o), as in
    :func:`lstm_cell`."""

    gates = 4

    @checked
    def forward(
        self,
        inputs: Float[Tensor, "*batch input"],
        state: Float[Tensor, "*batch hidden"],
        cell: Float[Tensor, "*batch hidden"],
    ) -> tuple[Float[Tensor, "*batch hidden"], Float[Tensor, "*batch hidden"]]:
        return lstm_cell(
            inputs,
            state,
            cell,
            self.w_input,
            self.w_hidden,
            self.b_input,
            self.b_hidden,
        )


# --8<-- [end:LSTMCell]
