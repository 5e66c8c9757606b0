"""Sublayers, embeddings and encoder/decoder layers: equal to PyTorch's, checked
shapes."""

import math

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import TypeCheckError
from torch import nn

import named_transformer as nt
from named_transformer.interop.pytorch import from_torch, mask_from_torch
from named_transformer.models.decoder import DecoderLayer
from named_transformer.models.embedding import (
    LearnedPositions,
    SinusoidalPositions,
    TokenEmbedding,
    embed,
)
from named_transformer.models.encoder import EncoderLayer
from named_transformer.models.generator import Generator, log_probabilities
from named_transformer.models.sublayers import FeedForward, LayerNorm, Residual
from tests.test_multihead import recorded

B, SEQ_Q, SEQ, LAYER, HEADS, HIDDEN, VOCAB = 2, 3, 5, 12, 3, 10, 11
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
PADDING = torch.tensor(
    [[False] * SEQ, [False] * (SEQ - 2) + [True] * 2]
)  # PyTorch: True = pad
REAL = ~PADDING


def test_layer_norm_module_equals_torch():
    ours, theirs = LayerNorm(LAYER, eps=1e-6), nn.LayerNorm(LAYER, eps=1e-6)
    with torch.no_grad():
        ours.gamma.normal_()
        ours.beta.normal_()
        theirs.weight.copy_(ours.gamma)
        theirs.bias.copy_(ours.beta)
    x = torch.randn(B, SEQ, LAYER)
    torch.testing.assert_close(ours(x), theirs(x))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_is_a_kernel_size_1_convolution(activation):
    """The NYU notes' "1D-convolution": the same network at every position."""
    ours = FeedForward(LAYER, HIDDEN, activation=activation).double()
    conv1 = nn.Conv1d(LAYER, HIDDEN, kernel_size=1).double()
    conv2 = nn.Conv1d(HIDDEN, LAYER, kernel_size=1).double()
    with torch.no_grad():
        conv1.weight.copy_(ours.w1[..., None])  # Conv1d's weight is (out, in, kernel)
        conv1.bias.copy_(ours.b1)
        conv2.weight.copy_(ours.w2[..., None])
        conv2.bias.copy_(ours.b2)
    x = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    act = F.relu if activation == "relu" else F.gelu
    expected = conv2(act(conv1(x.transpose(1, 2)))).transpose(
        1, 2
    )  # Conv1d wants channels first
    torch.testing.assert_close(ours(x), expected, atol=1e-12, rtol=0)


def test_feed_forward_rejects_unknown_activation():
    with pytest.raises(ValueError, match="activation"):
        FeedForward(LAYER, HIDDEN, activation="tanh")


def test_residual_post_norm_and_pre_norm_are_the_papers_formulas():
    x = torch.randn(B, SEQ, LAYER)
    f = torch.sin
    post, pre = Residual(LAYER), Residual(LAYER, norm_first=True)
    ln = lambda t: F.layer_norm(t, (LAYER,))  # noqa: E731
    torch.testing.assert_close(post(x, f), ln(x + f(x)))
    torch.testing.assert_close(pre(x, f), x + f(ln(x)))
    assert not torch.allclose(post(x, f), pre(x, f))  # two different functions


def test_embedding_is_a_scaled_row_lookup_and_positions_follow_the_inputs():
    e = TokenEmbedding(VOCAB, LAYER)
    tokens = torch.randint(VOCAB, (B, SEQ))
    one_hot = F.one_hot(tokens, VOCAB).float()
    torch.testing.assert_close(
        e(tokens), one_hot @ e.table * math.sqrt(LAYER)
    )  # E ⊙_vocab I
    positions = SinusoidalPositions(LAYER, dropout=0.0)
    x = torch.zeros(B, SEQ, LAYER, dtype=torch.float64)
    torch.testing.assert_close(
        positions(x)[0], nt.sinusoidal_positions(SEQ, LAYER, dtype=torch.float64)
    )
    torch.testing.assert_close(positions(x[:, :2], offset=3)[0], positions(x)[0, 3:])
    meta = positions(torch.zeros(B, SEQ, LAYER, dtype=torch.float16, device="meta"))
    assert meta.device.type == "meta" and meta.dtype == torch.float16
    assert sum(p.numel() for p in positions.parameters()) == 0


def test_sinusoidal_table_is_kept_grows_on_demand_and_stays_out_of_checkpoints():
    positions = SinusoidalPositions(LAYER, dropout=0.0)
    x = torch.zeros(1, 1, LAYER)
    for offset in (
        0,
        5,
        63,
        64,
        200,
        1000,
    ):  # past the first table (64 rows) and its doubling
        expected = nt.sinusoidal_positions(1, LAYER, offset=offset)
        torch.testing.assert_close(
            positions(x, offset=offset)[0], expected, rtol=0, atol=1e-6
        )
    assert (
        len(positions._tables) == 1
        and positions._tables[LAYER, torch.float32, x.device].shape[0] >= 1001
    )
    positions(x.double())  # another dtype: its own table
    assert len(positions._tables) == 2
    assert positions.state_dict() == {}


def test_learned_positions():
    learned = LearnedPositions(7, LAYER, dropout=0.0)
    x = torch.zeros(B, SEQ, LAYER)
    torch.testing.assert_close(learned(x, offset=2)[0], learned.table[2 : 2 + SEQ])
    with pytest.raises(ValueError, match="max_positions"):
        learned(x, offset=3)


def test_generator_log_probabilities_and_tying():
    e = TokenEmbedding(VOCAB, LAYER)
    tied = Generator(LAYER, VOCAB, table=e.table, bias=False)
    assert tied.table is e.table
    x = torch.randn(B, SEQ, LAYER)
    torch.testing.assert_close(tied(x), torch.log_softmax(x @ e.table.T, -1))
    torch.testing.assert_close(tied(x).exp().sum(-1), torch.ones(B, SEQ))
    with pytest.raises(ValueError, match="tied table"):
        Generator(LAYER + 1, VOCAB, table=e.table)


OPTIONS = [(False, "relu"), (False, "gelu"), (True, "relu"), (True, "gelu")]


def encoder_pair(dtype, norm_first, activation):
    theirs = nn.TransformerEncoderLayer(
        LAYER, HEADS, HIDDEN, dropout=0.1, activation=activation,
        norm_first=norm_first, batch_first=True,
    ).to(dtype).eval()  # fmt: skip
    return theirs, from_torch(theirs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first, activation", OPTIONS)
def test_encoder_layer_equals_torch(dtype, norm_first, activation):
    theirs, ours = encoder_pair(dtype, norm_first, activation)
    x = torch.randn(B, SEQ, LAYER, dtype=dtype)
    causal = nt.causal_mask(SEQ)
    expected = theirs(x, src_mask=~causal, src_key_padding_mask=PADDING)
    got, weights = recorded(ours, ["self_attention.weights"], x,
                            mask_from_torch(~causal, PADDING))  # fmt: skip
    assert weights.shape == (B, HEADS, SEQ, SEQ)
    torch.testing.assert_close(got[REAL], expected[REAL], atol=TOL[dtype], rtol=0)
    torch.testing.assert_close(ours(x), theirs(x), atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first, activation", OPTIONS)
def test_decoder_layer_equals_torch(dtype, norm_first, activation):
    theirs = nn.TransformerDecoderLayer(
        LAYER, HEADS, HIDDEN, activation=activation, norm_first=norm_first,
        batch_first=True,
    ).to(dtype).eval()  # fmt: skip
    ours = from_torch(theirs)
    target, memory = (
        torch.randn(B, SEQ_Q, LAYER, dtype=dtype),
        torch.randn(B, SEQ, LAYER, dtype=dtype),
    )
    causal = nt.causal_mask(SEQ_Q)
    expected = theirs(target, memory, tgt_mask=~causal, memory_key_padding_mask=PADDING)
    got, own, cross = recorded(
        ours, ["self_attention.weights", "cross_attention.weights"], target, memory,
        causal, mask_from_torch(None, PADDING),
    )  # fmt: skip
    assert own.shape == (B, HEADS, SEQ_Q, SEQ_Q) and cross.shape == (
        B,
        HEADS,
        SEQ_Q,
        SEQ,
    )
    assert (cross[1, :, :, -2:] == 0).all()  # padded memory positions get no weight
    torch.testing.assert_close(got, expected, atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_gradients_equal_torch_in_float64(norm_first):
    theirs = nn.TransformerDecoderLayer(
        LAYER, HEADS, HIDDEN, activation="gelu", norm_first=norm_first, batch_first=True
    ).double().eval()  # fmt: skip
    ours = from_torch(theirs)
    target = torch.randn(B, SEQ_Q, LAYER, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(B, SEQ, LAYER, dtype=torch.float64, requires_grad=True)
    causal = nt.causal_mask(SEQ_Q)
    got = ours(target, memory, causal).square().sum()
    expected = theirs(target, memory, tgt_mask=~causal).square().sum()
    pairs = [
        (ours.feed_forward.w1, theirs.linear1.weight),
        (ours.feed_forward_residual.norm.gamma, theirs.norm3.weight),
        (ours.cross_attention.b_o, theirs.multihead_attn.out_proj.bias),
    ]
    grads = torch.autograd.grad(got, [target, memory, *(p for p, _ in pairs)])
    wants = torch.autograd.grad(expected, [target, memory, *(p for _, p in pairs)])
    for g, w in zip(grads, wants, strict=True):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=0)


def test_layer_parameter_counts_match_formula_and_torch():
    enc = EncoderLayer(LAYER, HEADS, HIDDEN)
    dec = DecoderLayer(LAYER, HEADS, HIDDEN)
    attention = 4 * LAYER**2 + 4 * LAYER
    ffn = 2 * LAYER * HIDDEN + HIDDEN + LAYER
    norm = 2 * LAYER
    assert enc.num_parameters() == attention + ffn + 2 * norm
    assert dec.num_parameters() == 2 * attention + ffn + 3 * norm
    torch_count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert enc.num_parameters() == torch_count(
        nn.TransformerEncoderLayer(LAYER, HEADS, HIDDEN)
    )
    assert dec.num_parameters() == torch_count(
        nn.TransformerDecoderLayer(LAYER, HEADS, HIDDEN)
    )


def test_modules_reject_wrong_axis_sizes():
    x = torch.randn(B, SEQ, LAYER + 1)
    checks = [
        (lambda: LayerNorm(LAYER)(x), "gamma"),
        (lambda: FeedForward(LAYER, HIDDEN)(x), "w1"),
        (lambda: Residual(LAYER)(x, lambda t: t), "gamma"),
        (lambda: EncoderLayer(LAYER, HEADS, HIDDEN)(x), "w_q"),
        (
            lambda: DecoderLayer(LAYER, HEADS, HIDDEN)(x, torch.randn(B, SEQ, LAYER)),
            "w_q",
        ),
        (lambda: DecoderLayer(LAYER, HEADS, HIDDEN)(x[..., :LAYER], x), "w_k"),
        (lambda: TokenEmbedding(VOCAB, LAYER)(torch.randn(B, SEQ)), "tokens"),
        (
            lambda: embed(torch.zeros(B, SEQ, dtype=torch.long), torch.randn(LAYER)),
            "table",
        ),
        (lambda: Generator(LAYER, VOCAB)(x), "table"),
        (
            lambda: log_probabilities(
                x, torch.randn(VOCAB, LAYER + 1), torch.randn(VOCAB + 1)
            ),
            "bias",
        ),
        (lambda: SinusoidalPositions(LAYER)(torch.randn(LAYER)), "inputs"),
        (lambda: LearnedPositions(7, LAYER)(x), "positions"),
    ]
    for call, argument in checks:
        with pytest.raises(TypeCheckError, match=argument):
            call()
