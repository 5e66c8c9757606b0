"""Named RNN cells equal torch.nn.RNNCell, GRUCell and LSTMCell with copied weights."""

import pytest
import torch
from einops import rearrange
from hypothesis import given
from hypothesis import strategies as st
from jaxtyping import TypeCheckError

import named_transformer as nt
from named_transformer.models.rnn import (
    ElmanCell,
    GRUCell,
    LSTMCell,
    elman_cell,
    gru_cell,
    lstm_cell,
)

# distinct sizes for every axis: batch 2, input 5, hidden 7
BATCH, INPUT, HIDDEN = 2, 5, 7


def copy_elman(torch_cell: torch.nn.RNNCell) -> ElmanCell:
    cell = ElmanCell(torch_cell.input_size, torch_cell.hidden_size)
    with torch.no_grad():
        cell.w_input.copy_(torch_cell.weight_ih)
        cell.w_hidden.copy_(torch_cell.weight_hh)
        cell.bias.copy_(torch_cell.bias_ih + torch_cell.bias_hh)
    return cell


def copy_gated(torch_cell, ours):
    """Split PyTorch's stacked (gates*hidden) rows into our named gates axis."""
    h = torch_cell.hidden_size
    with torch.no_grad():
        ours.w_input.copy_(
            rearrange(torch_cell.weight_ih, "(gates h) i -> gates h i", h=h)
        )
        ours.w_hidden.copy_(
            rearrange(torch_cell.weight_hh, "(gates h) k -> gates h k", h=h)
        )
        ours.b_input.copy_(rearrange(torch_cell.bias_ih, "(gates h) -> gates h", h=h))
        ours.b_hidden.copy_(rearrange(torch_cell.bias_hh, "(gates h) -> gates h", h=h))
    return ours


@given(batch=st.integers(1, 4), seed=st.integers(0, 1000))
def test_elman_equals_torch_rnn_cell(batch, seed):
    torch.manual_seed(seed)
    reference = torch.nn.RNNCell(INPUT, HIDDEN)
    ours = copy_elman(reference)
    x, h = torch.randn(batch, INPUT), torch.randn(batch, HIDDEN)
    torch.testing.assert_close(ours(x, h), reference(x, h))


@given(batch=st.integers(1, 4), seed=st.integers(0, 1000))
def test_gru_equals_torch_gru_cell(batch, seed):
    torch.manual_seed(seed)
    reference = torch.nn.GRUCell(INPUT, HIDDEN)
    ours = copy_gated(reference, GRUCell(INPUT, HIDDEN))
    x, h = torch.randn(batch, INPUT), torch.randn(batch, HIDDEN)
    torch.testing.assert_close(ours(x, h), reference(x, h))


@given(batch=st.integers(1, 4), seed=st.integers(0, 1000))
def test_lstm_equals_torch_lstm_cell(batch, seed):
    torch.manual_seed(seed)
    reference = torch.nn.LSTMCell(INPUT, HIDDEN)
    ours = copy_gated(reference, LSTMCell(INPUT, HIDDEN))
    x, h, c = (
        torch.randn(batch, INPUT),
        torch.randn(batch, HIDDEN),
        torch.randn(batch, HIDDEN),
    )
    h_ref, c_ref = reference(x, (h, c))
    h_ours, c_ours = ours(x, h, c)
    torch.testing.assert_close(h_ours, h_ref)
    torch.testing.assert_close(c_ours, c_ref)


def test_cells_lift_over_several_batch_axes():
    reference = torch.nn.GRUCell(INPUT, HIDDEN)
    ours = copy_gated(reference, GRUCell(INPUT, HIDDEN))
    x, h = torch.randn(3, BATCH, INPUT), torch.randn(3, BATCH, HIDDEN)
    flat = reference(rearrange(x, "a b i -> (a b) i"), rearrange(h, "a b k -> (a b) k"))
    expected = rearrange(flat, "(a b) k -> a b k", a=3)
    torch.testing.assert_close(ours(x, h), expected)


def _double(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def test_gradcheck_elman():
    args = (
        _double(BATCH, INPUT),
        _double(BATCH, HIDDEN),
        _double(HIDDEN, INPUT),
        _double(HIDDEN, HIDDEN),
        _double(HIDDEN),
    )
    assert torch.autograd.gradcheck(elman_cell, args)


def test_gradcheck_gru():
    args = (
        _double(BATCH, INPUT),
        _double(BATCH, HIDDEN),
        _double(3, HIDDEN, INPUT),
        _double(3, HIDDEN, HIDDEN),
        _double(3, HIDDEN),
        _double(3, HIDDEN),
    )
    assert torch.autograd.gradcheck(gru_cell, args)


def test_gradcheck_lstm():
    args = (
        _double(BATCH, INPUT),
        _double(BATCH, HIDDEN),
        _double(BATCH, HIDDEN),
        _double(4, HIDDEN, INPUT),
        _double(4, HIDDEN, HIDDEN),
        _double(4, HIDDEN),
        _double(4, HIDDEN),
    )
    assert torch.autograd.gradcheck(lambda *a: lstm_cell(*a), args)


@pytest.mark.parametrize("cell_type", [ElmanCell, GRUCell, LSTMCell])
def test_wrong_state_size_names_the_argument(cell_type):
    cell = cell_type(INPUT, HIDDEN)
    x, bad = torch.randn(BATCH, INPUT), torch.randn(BATCH, HIDDEN + 1)
    args = (x, bad, bad) if cell_type is LSTMCell else (x, bad)
    with pytest.raises(TypeCheckError, match="state"):
        cell(*args)


@pytest.mark.parametrize("fn", [elman_cell, gru_cell, lstm_cell])
def test_wrong_input_size_in_functional_names_the_argument(fn):
    gates = {elman_cell: (), gru_cell: (3,), lstm_cell: (4,)}[fn]
    x, h = torch.randn(BATCH, INPUT + 1), torch.randn(BATCH, HIDDEN)
    weights = [torch.randn(*gates, HIDDEN, INPUT), torch.randn(*gates, HIDDEN, HIDDEN)]
    biases = (
        [torch.randn(HIDDEN)] if fn is elman_cell else [torch.randn(*gates, HIDDEN)] * 2
    )
    states = [h, h] if fn is lstm_cell else [h]
    with pytest.raises(TypeCheckError, match="inputs"):
        fn(x, *states, *weights, *biases)


def test_gru_with_four_gates_is_a_clear_error():
    x, h = torch.randn(BATCH, INPUT), torch.randn(BATCH, HIDDEN)
    with pytest.raises(ValueError, match="3 stacked gates"):
        gru_cell(
            x,
            h,
            torch.randn(4, HIDDEN, INPUT),
            torch.randn(4, HIDDEN, HIDDEN),
            torch.randn(4, HIDDEN),
            torch.randn(4, HIDDEN),
        )


def test_bad_sizes_are_a_clear_error():
    with pytest.raises(ValueError, match="hidden_size"):
        GRUCell(INPUT, 0)


def test_meta_device_and_dtype_follow_inputs():
    cell = GRUCell(INPUT, HIDDEN).to(device="meta", dtype=torch.float64)
    out = cell(
        torch.empty(BATCH, INPUT, device="meta", dtype=torch.float64),
        torch.empty(BATCH, HIDDEN, device="meta", dtype=torch.float64),
    )
    assert (
        out.device.type == "meta"
        and out.dtype == torch.float64
        and out.shape == (BATCH, HIDDEN)
    )


def test_checks_off_still_computes():
    cell = ElmanCell(INPUT, HIDDEN)
    with nt.shape_checks(False):
        out = cell(torch.randn(BATCH, INPUT), torch.randn(BATCH, HIDDEN))
    assert out.shape == (BATCH, HIDDEN)
