"""The score zoo against the formulas written out here with plain torch."""

import math

import torch
import torch.nn.functional as F

import named_transformer as nt

SEQ_Q, SEQ, KEY_Q, KEY, HIDDEN = 5, 7, 3, 4, 6


def test_dot_and_scaled_dot():
    q, k = torch.randn(2, SEQ_Q, KEY), torch.randn(2, SEQ, KEY)
    expected = torch.bmm(q, k.transpose(1, 2))
    torch.testing.assert_close(nt.dot_score(q, k), expected)
    torch.testing.assert_close(nt.scaled_dot_score(q, k), expected / math.sqrt(KEY))


def test_general_score_allows_different_query_and_key_sizes():
    q, k, w = (
        torch.randn(2, SEQ_Q, KEY_Q),
        torch.randn(2, SEQ, KEY),
        torch.randn(KEY_Q, KEY),
    )
    expected = torch.stack([q[b] @ w @ k[b].T for b in range(2)])
    torch.testing.assert_close(nt.general_score(q, k, w), expected)


def test_additive_score_is_w_tanh_w1_q_plus_w2_k():
    q, k = torch.randn(2, SEQ_Q, KEY_Q), torch.randn(2, SEQ, KEY)
    w1, w2, w = (
        torch.randn(HIDDEN, KEY_Q),
        torch.randn(HIDDEN, KEY),
        torch.randn(HIDDEN),
    )
    expected = torch.empty(2, SEQ_Q, SEQ)
    for b in range(2):
        for i in range(SEQ_Q):
            for j in range(SEQ):
                expected[b, i, j] = w @ torch.tanh(w1 @ q[b, i] + w2 @ k[b, j])
    torch.testing.assert_close(nt.additive_score(q, k, w1, w2, w), expected)


def test_additive_score_equals_the_concat_form():
    q, k = torch.randn(SEQ_Q, KEY_Q), torch.randn(SEQ, KEY)
    w1, w2, w = (
        torch.randn(HIDDEN, KEY_Q),
        torch.randn(HIDDEN, KEY),
        torch.randn(HIDDEN),
    )
    concat = torch.cat(
        [q[:, None].expand(-1, SEQ, -1), k[None].expand(SEQ_Q, -1, -1)], -1
    )
    expected = torch.tanh(concat @ torch.cat([w1, w2], 1).T) @ w  # w^T tanh(W[q; k])
    torch.testing.assert_close(nt.additive_score(q, k, w1, w2, w), expected)


def test_cosine_score_equals_cosine_similarity():
    q, k = torch.randn(2, SEQ_Q, KEY), torch.randn(2, SEQ, KEY)
    expected = F.cosine_similarity(q[:, :, None], k[:, None], dim=-1)
    torch.testing.assert_close(nt.cosine_score(q, k), expected)


def test_location_score_depends_on_the_query_state_only():
    s, w = torch.randn(2, SEQ_Q, HIDDEN), torch.randn(SEQ, HIDDEN)
    torch.testing.assert_close(nt.location_score(s, w), s @ w.T)


def test_qkv_score_is_the_bilinear_score_with_w_q_transpose_w_k():
    x, w_q, w_k = (
        torch.randn(SEQ, 8, dtype=torch.float64),
        *(torch.randn(KEY, 8, dtype=torch.float64) for _ in "qk"),
    )
    queries, keys = x @ w_q.T, x @ w_k.T  # Q = W^Q x, K = W^K x
    bilinear = nt.general_score(x, x, w_q.T @ w_k)  # W = W^{Q T} W^K, rank <= |key|
    torch.testing.assert_close(nt.dot_score(queries, keys), bilinear)
    assert torch.linalg.matrix_rank(w_q.T @ w_k) <= KEY


def test_gradcheck_each_score():
    def t(*shape):
        return torch.randn(*shape, dtype=torch.float64, requires_grad=True)

    q, k, qq = t(2, SEQ_Q, KEY), t(2, SEQ, KEY), t(2, SEQ_Q, KEY_Q)
    assert torch.autograd.gradcheck(nt.dot_score, (q, k))
    assert torch.autograd.gradcheck(nt.scaled_dot_score, (q, k))
    assert torch.autograd.gradcheck(nt.general_score, (qq, k, t(KEY_Q, KEY)))
    assert torch.autograd.gradcheck(
        nt.additive_score, (qq, k, t(HIDDEN, KEY_Q), t(HIDDEN, KEY), t(HIDDEN))
    )
    assert torch.autograd.gradcheck(nt.cosine_score, (q, k))
    assert torch.autograd.gradcheck(
        nt.location_score, (t(2, SEQ_Q, HIDDEN), t(SEQ, HIDDEN))
    )
