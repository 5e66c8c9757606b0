"""Checks of the page "Attention in seq2seq (Bahdanau)": ``gru_cell``,
``bahdanau_attention``."""

from __future__ import annotations

from collections.abc import Callable

import torch
from einops import rearrange
from torch import Tensor

from named_transformer.exercises.checks._references import _mm, _mt, _softmax
from named_transformer.exercises.checks._support import (
    LARGE,
    Check,
    _close,
    _dyadic,
    _randn,
    _rejects,
    _stable,
    _unpack,
)


# --- the GRU step -------------------------------------------------------------------
def _gru_weights() -> list[Tensor]:
    hidden, inputs = 4, 3
    return [_randn(3, hidden, inputs, seed=57), _randn(3, hidden, hidden, seed=58),
            _randn(3, hidden, seed=59), _randn(3, hidden, seed=60)]  # fmt: skip


def _gru_mistake(
    inputs: Tensor, state: Tensor, weights: list[Tensor], *, cho: bool, swap: bool
) -> Tensor:
    """A GRU step with the reset gate before the projection (Cho et al.) or with z
    and 1 - z swapped: what two known mistakes compute."""
    w_input, w_hidden, b_input, b_hidden = weights
    per_gate = "... width -> ... 1 1 width"
    given = (rearrange(inputs, per_gate) * w_input).sum(-1) + b_input
    carried = (rearrange(state, per_gate) * w_hidden).sum(-1) + b_hidden
    reset = torch.sigmoid(given[..., 0, :] + carried[..., 0, :])
    update = torch.sigmoid(given[..., 1, :] + carried[..., 1, :])
    if cho:  # W^h_n·(r ⊙ h) + b^h_n
        carried_n = _mm(reset * state, _mt(w_hidden[2])) + b_hidden[2]
    else:
        carried_n = reset * carried[..., 2, :]
    candidate = torch.tanh(given[..., 2, :] + carried_n)
    keep = 1 - update if swap else update
    return (1 - keep) * candidate + keep * state


def gru_cell_matches_torch(impl: Check) -> None:
    """Equal to torch.nn.GRUCell, gates stacked (r, z, n), reset after W^h."""
    inputs, state = _randn(2, 3, seed=61), _randn(2, 4, seed=62)
    weights = _gru_weights()
    w_input, w_hidden, b_input, b_hidden = weights
    expected = torch.gru_cell(
        inputs, state,
        rearrange(w_input, "gates hidden input -> (gates hidden) input"),
        rearrange(w_hidden, "gates hidden_next hidden -> (gates hidden_next) hidden"),
        rearrange(b_input, "gates hidden -> (gates hidden)"),
        rearrange(b_hidden, "gates hidden -> (gates hidden)"),
    )  # fmt: skip
    mistakes = [
        (_gru_mistake(inputs, state, weights, cho=True, swap=False),
         "the reset gate is applied before the hidden projection, W^h·(r ⊙ h), as "
         "in Cho et al.; PyTorch applies it after, r ⊙ (W^h·h + b^h)"),
        (_gru_mistake(inputs, state, weights, cho=False, swap=True),
         "z and 1 − z are swapped: h' = (1 − z) ⊙ n + z ⊙ h keeps the old "
         "state where z is 1"),
    ]  # fmt: skip
    _close(impl(inputs, state, *weights), expected, "torch.nn.GRUCell",
           mistakes=mistakes)  # fmt: skip


def gru_cell_wrong_shape(impl: Check) -> None:
    """A state of another width is a shape error naming hidden."""
    w_input, w_hidden, b_input, b_hidden = _gru_weights()
    _rejects(lambda: impl(_randn(2, 3), _randn(2, 5), w_input, w_hidden, b_input,
                          b_hidden),
             "a state 5 wide for weights of hidden 4")  # fmt: skip


# --- Bahdanau's attention -----------------------------------------------------------
def _bahdanau_score(
    weight: Tensor, shift: Tensor | float = 0.0
) -> Callable[[Tensor, Tensor], Tensor]:
    """A general score with its weight bound (plus ``shift``, to make it large)."""

    def score(query: Tensor, annotations: Tensor) -> Tensor:
        return _mm(_mm(query, weight), _mt(annotations)) + shift

    return score


def _alpha_and_context(
    state: Tensor, annotations: Tensor, weight: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    query = rearrange(state, "b hidden -> b 1 hidden")
    scores = rearrange(_bahdanau_score(weight)(query, annotations), "b 1 seq -> b seq")
    alpha = _softmax(scores, mask)
    return alpha, (rearrange(alpha, "b seq -> b seq 1") * annotations).sum(-2)


def bahdanau_attention_matches_equation(impl: Check) -> None:
    """alpha = softmax of the masked scores along seq; context = alpha ·seq h."""
    state, annotations = _randn(2, 4, seed=63), _randn(2, 5, 6, seed=64)
    weight, mask = _randn(4, 6, seed=65), torch.arange(5) < torch.tensor([[3], [5]])
    alpha, context = _alpha_and_context(state, annotations, weight, mask)
    result = _unpack(impl(state, annotations, mask, _bahdanau_score(weight)),
                     "context, alpha")  # fmt: skip
    _close(result[1], alpha, "softmax of the scores along seq, 0 where masked",
           "(the weights alpha)")  # fmt: skip
    _close(result[0], context, "alpha·h along seq", "(the context)")


def bahdanau_attention_stable_at_large_scores(impl: Check) -> None:
    """Scores of about +2e4 (sequence 0) and -2e4 (sequence 1) in float32."""
    state, annotations = _dyadic(2, 4, seed=66), _dyadic(2, 5, 6, seed=67)
    weight, mask = _dyadic(4, 6, seed=68), torch.arange(5) < torch.tensor([[3], [5]])
    shift = rearrange(torch.tensor([LARGE, -LARGE]), "b -> b 1 1")
    alpha, context = _alpha_and_context(state.double(), annotations.double(),
                                        weight.double(), mask)  # fmt: skip
    result = _unpack(impl(state, annotations, mask, _bahdanau_score(weight, shift)),
                     "context, alpha")  # fmt: skip
    _stable(result[1], alpha, "softmax of the scores along seq (the weights alpha)")
    _stable(result[0], context, "alpha·h along seq (the context)")


def bahdanau_attention_wrong_shape(impl: Check) -> None:
    """A mask over another number of positions is a shape error naming seq."""
    mask = torch.ones(2, 4, dtype=torch.bool)
    _rejects(lambda: impl(_randn(2, 4), _randn(2, 5, 6), mask,
                          _bahdanau_score(_randn(4, 6))),
             "a mask over 4 positions for 5 annotations")  # fmt: skip


CHECKS: dict[str, tuple[Check, ...]] = {
    "gru_cell": (gru_cell_matches_torch, gru_cell_wrong_shape),
    "bahdanau_attention": (bahdanau_attention_matches_equation,
                           bahdanau_attention_stable_at_large_scores,
                           bahdanau_attention_wrong_shape),
}  # fmt: skip
