"""Masks, positions, layer norm, feed-forward and attention pooling as plain
functions."""

import math

import einops
import pytest
import torch
import torch.nn.functional as F
from einops import einsum

import named_transformer as nt
from named_transformer.core.fast import ReLU

SEQ, LAYER, HIDDEN = 7, 6, 5


def test_causal_mask_is_the_lower_triangle_and_offsets_shift_it():
    assert torch.equal(nt.causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())
    # three new queries after a cache of two: query i sits at position 2 + i
    expected = torch.tensor(
        [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(nt.causal_mask(3, 5, offset=2), expected)


def test_padding_masks_from_lengths():
    lengths = torch.tensor([3, 0, 5])
    mask = nt.padding_mask(lengths, 5)
    assert mask.tolist() == [[True] * 3 + [False] * 2, [False] * 5, [True] * 5]
    assert nt.key_padding_mask(lengths, 5).shape == (3, 1, 5)


def test_standardize_and_layer_norm_equal_f_layer_norm():
    x = torch.randn(2, SEQ, LAYER)
    gamma, beta = torch.randn(LAYER), torch.randn(LAYER)
    torch.testing.assert_close(nt.standardize(x), F.layer_norm(x, (LAYER,)))
    torch.testing.assert_close(
        nt.layer_norm(x, gamma, beta, 1e-6),
        F.layer_norm(x, (LAYER,), gamma, beta, 1e-6),
    )


@pytest.mark.parametrize("gradient", [False, True])
def test_standardize_equals_its_equation_with_and_without_a_gradient(gradient):
    # without a gradient standardize hands X̂ to PyTorch's fused layer_norm, with one
    # it computes the arithmetic: both against the equation written out in float64
    x = (torch.randn(3, SEQ, LAYER, dtype=torch.float64) * 4 + 2).requires_grad_(
        gradient
    )
    mean = einops.reduce(x, "... layer -> ... 1", "mean")
    variance = einops.reduce((x - mean) ** 2, "... layer -> ... 1", "mean")
    expected = (x - mean) / torch.sqrt(variance + 0.5)
    torch.testing.assert_close(nt.standardize(x, 0.5), expected, rtol=0, atol=1e-12)


def test_layer_norm_written_out_gradient_equals_f_layer_norm_gradient():
    x = (torch.randn(3, SEQ, LAYER) * 4 + 2).requires_grad_()
    gamma, beta = (
        torch.randn(LAYER, requires_grad=True),
        torch.randn(LAYER, requires_grad=True),
    )
    upstream = torch.randn(3, SEQ, LAYER)
    ours = torch.autograd.grad(
        nt.layer_norm(x, gamma, beta), (x, gamma, beta), upstream
    )
    theirs = torch.autograd.grad(
        F.layer_norm(x, (LAYER,), gamma, beta), (x, gamma, beta), upstream
    )
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)


def test_standardize_refuses_a_second_derivative_rather_than_giving_a_wrong_one():
    x = torch.randn(2, LAYER, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(nt.standardize(x).pow(3).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|twice"):
        grad.sum().backward()


@pytest.mark.parametrize(
    "relu",
    [nt.relu, ReLU.apply, torch.compile(nt.relu, backend="aot_eager", fullgraph=True)],
)
def test_relu_and_its_written_out_gradient_equal_torch_relu(relu):
    x = torch.randn(4, SEQ, HIDDEN)
    x[0, 0, :2] = 0.0  # the kink: both give gradient 0 there
    x.requires_grad_()
    upstream = torch.randn(4, SEQ, HIDDEN)
    ours = relu(x)
    (ours_grad,) = torch.autograd.grad(ours, x, upstream)
    theirs = torch.relu(x)
    (theirs_grad,) = torch.autograd.grad(theirs, x, upstream)
    assert torch.equal(ours, theirs)
    assert torch.equal(ours_grad, theirs_grad)


def test_gradcheck_layer_norm_and_feed_forward():
    def t(*shape):
        return torch.randn(*shape, dtype=torch.float64, requires_grad=True)

    assert torch.autograd.gradcheck(
        nt.layer_norm, (t(2, SEQ, LAYER), t(LAYER), t(LAYER))
    )
    args = (t(2, SEQ, LAYER), t(HIDDEN, LAYER), t(HIDDEN), t(LAYER, HIDDEN), t(LAYER))
    assert torch.autograd.gradcheck(
        lambda *a: nt.feed_forward(*a, activation=torch.tanh), args
    )
    away_from_the_kink = (
        torch.rand(2, SEQ, HIDDEN, dtype=torch.float64) + 0.1
    ) * torch.randn(2, SEQ, HIDDEN).sign()
    assert torch.autograd.gradcheck(ReLU.apply, (away_from_the_kink.requires_grad_(),))


def test_feed_forward_equals_two_linear_layers_and_a_kernel_one_conv():
    x = torch.randn(2, SEQ, LAYER)
    w1, b1, w2, b2 = (
        torch.randn(HIDDEN, LAYER),
        torch.randn(HIDDEN),
        torch.randn(LAYER, HIDDEN),
        torch.randn(LAYER),
    )
    expected = F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
    torch.testing.assert_close(nt.feed_forward(x, w1, b1, w2, b2), expected)
    conv = F.conv1d(
        F.relu(F.conv1d(x.transpose(1, 2), w1[..., None], b1)), w2[..., None], b2
    )
    torch.testing.assert_close(nt.feed_forward(x, w1, b1, w2, b2), conv.transpose(1, 2))


def test_sinusoidal_positions_match_the_paper_formula():
    table = nt.sinusoidal_positions(SEQ, 8, dtype=torch.float64)
    for p in range(SEQ):
        for i in range(4):
            angle = p / 10000 ** (2 * i / 8)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle))
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle))


def test_sinusoidal_odd_width_and_offset():
    table = nt.sinusoidal_positions(10, 7)
    torch.testing.assert_close(nt.sinusoidal_positions(4, 7, offset=6), table[6:])
    assert table.shape == (10, 7)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_shifting_sinusoidal_positions_by_k_is_a_linear_map(k):
    width = 16
    table = nt.sinusoidal_positions(50, width, dtype=torch.float64)
    shifted = nt.sinusoidal_positions(50, width, offset=k, dtype=torch.float64)
    # the map is a rotation of each channel pair by k * frequency, independent of p
    rotation = torch.zeros(width, width, dtype=torch.float64)
    for i in range(width // 2):
        angle = k / 10000 ** (2 * i / width)
        c, s = math.cos(angle), math.sin(angle)
        rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    torch.testing.assert_close(table @ rotation, shifted)


def test_relative_position_index_clips_and_offsets():
    index = nt.relative_position_index(3, 6, 2, offset=1)
    for i in range(3):
        for j in range(6):
            assert index[i, j] == max(-2, min(2, j - (i + 1))) + 2
    with pytest.raises(ValueError, match="max_distance"):
        nt.relative_position_index(3, 3, -1)


def test_created_tensors_follow_the_device_and_dtype():
    meta = torch.device("meta")
    assert nt.causal_mask(3, 4, device=meta).device == meta
    assert (
        nt.padding_mask(torch.ones(2, dtype=torch.long, device=meta), 4).device == meta
    )
    table = nt.sinusoidal_positions(3, 4, dtype=torch.float64, device=meta)
    assert (table.device, table.dtype) == (meta, torch.float64)
    assert nt.relative_position_index(3, 4, 2, device=meta).device == meta
    q = torch.randn(2, 3, 4, device=meta)
    assert nt.attention(q, q, q, nt.causal_mask(3, device=meta)).device == meta


def pooling_weights():
    return torch.randn(HIDDEN, LAYER), torch.randn(HIDDEN), torch.randn(HIDDEN)


def test_attention_pooling_matches_raffel_and_ellis():
    h = torch.randn(2, SEQ, LAYER)
    w, b, v = pooling_weights()
    e = torch.tanh(h @ w.T + b) @ v
    alpha = torch.softmax(e, dim=-1)
    expected = (alpha[..., None] * h).sum(1)
    torch.testing.assert_close(nt.attention_pooling(h, w, b, v), expected)


def test_attention_pooling_ignores_padding():
    h = torch.randn(2, SEQ, LAYER)
    w, b, v = pooling_weights()
    lengths = torch.tensor([4, SEQ])
    mask = nt.padding_mask(lengths, SEQ)
    garbage = h.clone()
    garbage[0, 4:] = 1e3
    torch.testing.assert_close(
        nt.attention_pooling(garbage, w, b, v, mask),
        nt.attention_pooling(h, w, b, v, mask),
    )
    torch.testing.assert_close(
        nt.attention_pooling(h[:1, :4], w, b, v),
        nt.attention_pooling(h, w, b, v, mask)[:1],
    )
    assert (nt.attention_pooling_weights(h, w, b, v, mask)[0, 4:] == 0).all()


def test_gradcheck_attention_pooling():
    args = [
        torch.randn(*s, dtype=torch.float64, requires_grad=True)
        for s in [(2, SEQ, LAYER), (HIDDEN, LAYER), (HIDDEN,), (HIDDEN,)]
    ]
    assert torch.autograd.gradcheck(nt.attention_pooling, tuple(args))


def test_einsum_direction_of_feed_forward_weights():
    # W1 is stored as hidden x layer: the same layout as nn.Linear(layer, hidden).weight
    linear = torch.nn.Linear(LAYER, HIDDEN)
    x = torch.randn(SEQ, LAYER)
    torch.testing.assert_close(
        einsum(x, linear.weight, "seq layer, hidden layer -> seq hidden") + linear.bias,
        linear(x),
    )


def test_dropout_is_torchs_when_eager_and_off_outside_training():
    x = torch.randn(4, SEQ, HIDDEN)
    assert (
        nt.dropout(x, 0.3, training=False) is x
        and nt.dropout(x, 0.0, training=True) is x
    )
    torch.manual_seed(5)
    ours = nt.dropout(x, 0.3, training=True)
    torch.manual_seed(5)
    assert torch.equal(ours, F.dropout(x, 0.3, training=True))


def test_compiled_dropout_draws_a_float_mask_with_the_right_rate_and_gradient():
    p = 0.3
    compiled = torch.compile(nt.dropout, backend="aot_eager", fullgraph=True)
    x = (
        torch.rand(200, 500) + 1.0
    ).requires_grad_()  # no zeros: a dropped entry is exactly 0
    with nt.shape_checks(False):
        y = compiled(x, p, True)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.01  # 100,000 draws: std 0.0015
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    (grad,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(grad, kept.float() / (1 - p))
