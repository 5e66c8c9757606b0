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


def _reference_softmax(scores, mask):
    """The equation read literally, -inf where masked, then NaN rows (nothing to
    attend) set to zero: an independent reference for finite scores."""
    filled = scores.masked_fill(~mask, -torch.inf)
    return torch.softmax(filled, dim=-1).nan_to_num(0.0)


@given(
    shape=st.sampled_from([(5,), (3, 5), (2, 3, 5), (2, 1, 4, 6)]),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
    gradient=st.booleans(),
)
def test_property_masked_softmax_equals_the_minus_infinity_reference(
    shape, seed, dtype, gradient
):
    """Any broadcast mask, empty rows included, with a gradient recorded or not (the
    table reused in place): the weights of the -inf reference, in the scores' dtype,
    and the scores untouched."""
    generator = torch.Generator().manual_seed(seed)
    scores = (10 * torch.randn(shape, generator=generator)).to(dtype)
    mask = torch.rand(shape[-2:] if len(shape) > 1 else shape, generator=generator)
    mask = mask > 0.5
    expected = _reference_softmax(scores.double(), mask)
    given_scores = scores.clone().requires_grad_(gradient)
    weights = nt.softmax(given_scores, mask)
    assert weights.dtype == dtype
    tolerance = 1e-2 if dtype == torch.bfloat16 else 1e-6
    torch.testing.assert_close(weights.double(), expected, atol=tolerance, rtol=0)
    assert torch.equal(given_scores.detach(), scores)


def test_gradients_with_an_empty_row_and_a_mask_with_more_axes():
    """Checks off: the annotation binds ``batch`` to the scores' axes."""
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(2, 3, 5) > 0.5
    mask[0, 1] = False  # an empty row
    with nt.shape_checks(False):
        assert torch.autograd.gradcheck(lambda s: nt.softmax(s, mask), (scores,))
        with torch.no_grad():
            torch.testing.assert_close(
                nt.softmax(scores, mask), _reference_softmax(scores, mask)
            )


def test_the_additive_mask_is_zero_where_allowed_and_minus_infinity_elsewhere():
    mask = torch.tensor([[True, False], [False, False]])
    for dtype in (None, torch.float16, torch.float64):
        additive = nt.additive_mask(mask, dtype)
        assert additive.dtype == (dtype or torch.get_default_dtype())
        assert torch.equal(additive == 0, mask)
        assert (additive[~mask] == -torch.inf).all()
    scores = torch.tensor([[torch.nan, 1.0], [torch.inf, 1.0]])
    blocked = scores + nt.additive_mask(torch.tensor([False, True]))
    assert blocked[:, 0].isnan().all()  # NaN and +inf are not hidden, as documented


def test_softmax_in_place_writes_over_the_scores_only_where_it_can():
    """softmax_'s promise: over ``scores`` without a gradient; a new table while one
    is recorded, under autocast and for a mask with more axes than the scores; the
    same weights as softmax every time."""
    mask = torch.tensor([True, False, True, True, False])

    def call(scores, mask=mask):
        given = scores.clone()
        weights = nt.softmax_(given, mask)
        expected = nt.softmax(scores.detach(), mask)
        torch.testing.assert_close(weights.detach().float(), expected.float())
        return weights.data_ptr() == given.data_ptr()

    scores = torch.randn(3, 5)
    assert call(scores)  # no gradient: written over
    assert call(scores, None)
    assert not call(scores.clone().requires_grad_())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not call(scores)
    with nt.shape_checks(False):  # the annotation binds batch to the scores' axes
        assert not call(scores, torch.rand(2, 3, 5) > 0.5)


def test_an_empty_row_of_minus_infinity_is_nan_as_documented():
    """softmax's docstring: an empty row's scores must be finite; attention_weights
    takes the -inf as a score_bias and gives zeros."""
    scores = torch.full((2, 3), -torch.inf)
    scores[0] = torch.randn(3)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    assert nt.softmax(scores, mask)[1].isnan().all()
    queries, keys = torch.randn(2, 4), torch.randn(3, 4)
    bias = torch.zeros(2, 3)
    bias[1] = -torch.inf
    weights = nt.attention_weights(queries, keys, mask, score_bias=bias)
    assert torch.equal(weights[1], torch.zeros(3))
