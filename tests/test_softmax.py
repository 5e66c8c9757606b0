import torch
from hypothesis import given
from hypothesis import strategies as st

import named_transformer as nt


def test_softmax_equals_torch_softmax_over_last_axis():
    scores = torch.randn(2, 3, 5, 7)
    torch.testing.assert_close(nt.softmax(scores), torch.softmax(scores, dim=-1))


@given(beta=st.floats(0.01, 10.0))
def test_inverse_temperature_scales_the_scores(beta):
    scores = torch.randn(4, 6, dtype=torch.float64)
    torch.testing.assert_close(
        nt.softmax(scores, beta=beta), torch.softmax(beta * scores, -1)
    )


def test_weights_sum_to_one_and_masked_positions_get_zero():
    scores = torch.randn(3, 5, 7)
    mask = torch.rand(3, 5, 7) > 0.3
    mask[..., 0] = True
    weights = nt.softmax(scores, mask)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5))
    assert (weights[~mask] == 0).all()


def test_fully_masked_row_is_zeros_with_zero_gradient():
    scores = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, False, True, True], [False] * 4])
    weights = nt.softmax(scores, mask)
    assert torch.equal(weights[1], torch.zeros(4, dtype=torch.float64))
    (weights * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.equal(scores.grad[1], torch.zeros(4, dtype=torch.float64))


def test_huge_logits_stay_finite():
    scores = torch.tensor([[1e4, -1e4, 0.0], [1e4, 1e4, 1e4]])
    weights = nt.softmax(scores)
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(weights[0], torch.tensor([1.0, 0.0, 0.0]))


def test_gradcheck_softmax():
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([True, False, True, True, True])
    assert torch.autograd.gradcheck(lambda s: nt.softmax(s, mask, beta=0.7), (scores,))


@given(seed=st.integers(0, 10_000))
def test_hardmax_is_one_hot_at_the_argmax(seed):
    scores = torch.randn(4, 9, generator=torch.Generator().manual_seed(seed))
    one_hot = nt.hardmax(scores)
    assert torch.equal(one_hot.sum(-1), torch.ones(4))  # ||a||_0 = 1
    assert torch.equal(one_hot.argmax(-1), scores.argmax(-1))


def test_hardmax_is_the_large_beta_limit_of_softmax():
    scores = torch.randn(5, 8, dtype=torch.float64)
    errors = [
        (nt.softmax(scores, beta=b) - nt.hardmax(scores)).abs().max()
        for b in (1, 10, 1e3)
    ]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1e-6


def test_hardmax_respects_the_mask_and_empty_rows():
    scores = torch.tensor([[5.0, 1.0, 2.0], [1.0, 2.0, 3.0]])
    mask = torch.tensor([[False, True, True], [False, False, False]])
    torch.testing.assert_close(
        nt.hardmax(scores, mask), torch.tensor([[0.0, 0, 1], [0, 0, 0]])
    )
