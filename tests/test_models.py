"""Stacks and whole models: equal to PyTorch's, causal, equivariant, counted,
checked."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import TypeCheckError
from torch import nn

import named_transformer as nt
from named_transformer.interop.pytorch import from_torch, mask_from_torch
from named_transformer.models.classifier import TransformerClassifier, masked_max
from named_transformer.models.config import TransformerConfig
from named_transformer.models.decoder import Decoder
from named_transformer.models.encoder import Encoder
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.transformer import Transformer, TransformerStacks
from tests.test_multihead import recorded

B, SEQ_Q, SEQ, LAYER, HEADS, HIDDEN = 2, 4, 5, 12, 3, 10
SOURCE_VOCAB, TARGET_VOCAB, CLASSES = 11, 13, 3
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
PADDING = torch.tensor(
    [[False] * SEQ, [False] * (SEQ - 2) + [True] * 2]
)  # PyTorch: True = pad
REAL = ~PADDING
# each stack's attention weights, one tensor per layer (recorded: TransformerStacks'
# module paths; a Transformer's are under "stacks.")
KINDS = ["encoder.layers.{}.self_attention.weights",
         "decoder.layers.{}.self_attention.weights",
         "decoder.layers.{}.cross_attention.weights"]  # fmt: skip
TINY = TransformerConfig(
    encoder_layers=2, decoder_layers=3, layer=LAYER, heads=HEADS, hidden=HIDDEN
)


def torch_count(module):
    return sum(p.numel() for p in module.parameters())


# -------------------------------------------------------------- stacks equal PyTorch's


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "num_layers, norm_first, final_norm", [(1, False, False), (3, True, True)]
)
def test_encoder_stack_equals_torch(dtype, num_layers, norm_first, final_norm):
    layer = nn.TransformerEncoderLayer(
        LAYER, HEADS, HIDDEN, norm_first=norm_first, batch_first=True
    )
    norm = nn.LayerNorm(LAYER) if final_norm else None
    theirs = (
        nn.TransformerEncoder(layer, num_layers, norm, enable_nested_tensor=True)
        .to(dtype)
        .eval()
    )
    ours = from_torch(theirs)
    x = torch.randn(B, SEQ, LAYER, dtype=dtype)
    expected = theirs(x, src_key_padding_mask=PADDING)
    got, weights = recorded(ours, ["layers.{}.self_attention.weights"], x,
                            mask_from_torch(None, PADDING))  # fmt: skip
    assert len(weights) == num_layers and weights[0].shape == (B, HEADS, SEQ, SEQ)
    torch.testing.assert_close(got[REAL], expected[REAL], atol=TOL[dtype], rtol=0)
    assert ours.num_parameters() == torch_count(theirs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("num_layers, norm_first", [(1, True), (2, False)])
def test_decoder_stack_equals_torch(dtype, num_layers, norm_first):
    layer = nn.TransformerDecoderLayer(
        LAYER, HEADS, HIDDEN, norm_first=norm_first, batch_first=True
    )
    theirs = (
        nn.TransformerDecoder(layer, num_layers, nn.LayerNorm(LAYER)).to(dtype).eval()
    )
    ours = from_torch(theirs)
    target, memory = (
        torch.randn(B, SEQ_Q, LAYER, dtype=dtype),
        torch.randn(B, SEQ, LAYER, dtype=dtype),
    )
    causal = nt.causal_mask(SEQ_Q)
    expected = theirs(target, memory, tgt_mask=~causal, memory_key_padding_mask=PADDING)
    got, own, cross = recorded(
        ours, ["layers.{}.self_attention.weights", "layers.{}.cross_attention.weights"],
        target, memory, causal, mask_from_torch(None, PADDING),
    )  # fmt: skip
    assert len(own) == len(cross) == num_layers and cross[-1].shape == (
        B,
        HEADS,
        SEQ_Q,
        SEQ,
    )
    torch.testing.assert_close(got, expected, atol=TOL[dtype], rtol=0)
    assert ours.num_parameters() == torch_count(theirs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
def test_encoder_decoder_equals_nn_transformer(dtype, norm_first, activation):
    theirs = nn.Transformer(
        LAYER, HEADS, 2, 3, HIDDEN, activation=activation, norm_first=norm_first,
        batch_first=True,
    ).to(dtype).eval()  # fmt: skip
    ours = from_torch(theirs)
    source, target = (
        torch.randn(B, SEQ, LAYER, dtype=dtype),
        torch.randn(B, SEQ_Q, LAYER, dtype=dtype),
    )
    causal, keys = nt.causal_mask(SEQ_Q), mask_from_torch(None, PADDING)
    expected = theirs(
        source, target, tgt_mask=~causal,
        src_key_padding_mask=PADDING, memory_key_padding_mask=PADDING,
    )  # fmt: skip
    got, *weights = recorded(ours, KINDS, source, target, keys, causal, keys)
    torch.testing.assert_close(got, expected, atol=TOL[dtype], rtol=0)
    assert [len(w) for w in weights] == [2, 3, 3]
    assert weights[2][2].shape == (B, HEADS, SEQ_Q, SEQ)
    assert ours.num_parameters() == torch_count(theirs)


def test_encoder_decoder_gradients_equal_torch_in_float64():
    theirs = (
        nn.Transformer(LAYER, HEADS, 1, 2, HIDDEN, batch_first=True).double().eval()
    )
    ours = from_torch(theirs)
    source = torch.randn(B, SEQ, LAYER, dtype=torch.float64, requires_grad=True)
    target = torch.randn(B, SEQ_Q, LAYER, dtype=torch.float64, requires_grad=True)
    causal = nt.causal_mask(SEQ_Q)
    got = torch.autograd.grad(
        ours(source, target, target_mask=causal).sum(), [source, target]
    )
    want = torch.autograd.grad(
        theirs(source, target, tgt_mask=~causal).sum(), [source, target]
    )
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=0)


# ------------------------------------------------------------------------------- models


def test_config_defaults_are_the_papers_base_model_and_validate():
    base = TransformerConfig.base()
    assert (
        base.encoder_layers, base.decoder_layers, base.layer, base.heads, base.hidden
    ) == (6, 6, 512, 8, 2048)  # fmt: skip
    assert base.dropout == 0.1 and base.key == 64 and not base.norm_first
    assert TransformerConfig(norm_first=True).has_final_norm and not base.has_final_norm
    for bad, match in [
        ({"layer": 10, "heads": 3}, "divisible"),
        ({"dropout": 1.0}, "dropout"),
        ({"encoder_layers": 0}, "encoder_layers"),
        ({"activation": "tanh"}, "activation"),
        ({"hidden": 0}, "hidden"),
    ]:
        with pytest.raises(ValueError, match=match):
            TransformerConfig(**bad)


def test_base_encoder_decoder_has_the_papers_parameter_count():
    """6+6 layers of 512 with hidden 2048: the count of nn.Transformer()."""
    d, f, n = 512, 2048, 6
    attention, ffn, norm = 4 * d * d + 4 * d, 2 * d * f + f + d, 2 * d
    formula = (
        n * (attention + ffn + 2 * norm)
        + n * (2 * attention + ffn + 3 * norm)
        + 2 * norm
    )
    with torch.device("meta"):
        ours = TransformerStacks.build(TransformerConfig(final_norm=True))
        theirs = nn.Transformer()
    assert ours.num_parameters() == formula == torch_count(theirs) == 44_140_544


def transformer_count(config, source_vocab, target_vocab):
    d, f = config.layer, config.hidden
    attention, ffn, norm = 4 * d * d + 4 * d, 2 * d * f + f + d, 2 * d
    encoder = config.encoder_layers * (attention + ffn + 2 * norm)
    decoder = config.decoder_layers * (2 * attention + ffn + 3 * norm)
    return (
        encoder + decoder + (source_vocab + target_vocab) * d
    )  # generator tied: no extra


def test_transformer_log_probabilities_weights_and_parameter_count():
    model = Transformer(SOURCE_VOCAB, TARGET_VOCAB, TINY).eval()
    source = torch.randint(SOURCE_VOCAB, (B, SEQ))
    target = torch.randint(TARGET_VOCAB, (B, SEQ_Q))
    log_probs, *weights = recorded(
        model, [f"stacks.{kind}" for kind in KINDS], source, target,
        nt.key_padding_mask(torch.tensor([5, 3]), SEQ),
    )  # fmt: skip
    assert log_probs.shape == (B, SEQ_Q, TARGET_VOCAB)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(B, SEQ_Q))
    encoder, decoder_self, decoder_cross = weights
    assert [len(w) for w in weights] == [2, 3, 3]
    assert (decoder_cross[0][1, :, :, 3:] == 0).all()  # padding gets no attention
    assert (decoder_self[0].triu(1) == 0).all()  # causal by default
    assert model.num_parameters() == transformer_count(TINY, SOURCE_VOCAB, TARGET_VOCAB)
    untied = Transformer(SOURCE_VOCAB, TARGET_VOCAB, TINY, tie_output=False)
    assert untied.num_parameters() == model.num_parameters() + TARGET_VOCAB * (
        LAYER + 1
    )


def test_language_model_is_tied_causal_and_counted():
    config = TransformerConfig(
        decoder_layers=2, layer=LAYER, heads=HEADS, hidden=HIDDEN
    )
    model = LanguageModel(SOURCE_VOCAB, config).eval()
    assert model.generator.table is model.embedding.table
    d, f = LAYER, HIDDEN
    block = (4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d
    assert model.num_parameters() == 2 * block + SOURCE_VOCAB * d
    learned = LanguageModel(SOURCE_VOCAB, config, positions="learned", max_positions=9)
    assert learned.num_parameters() == model.num_parameters() + 9 * d
    tokens = torch.randint(SOURCE_VOCAB, (B, SEQ))
    log_probs, weights = recorded(model, ["blocks.layers.{}.self_attention.weights"],
                                  tokens)  # fmt: skip
    assert log_probs.shape == (B, SEQ, SOURCE_VOCAB) and len(weights) == 2
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % SOURCE_VOCAB
    torch.testing.assert_close(model(changed)[:, :-1], log_probs[:, :-1])
    with pytest.raises(ValueError, match="positions"):  # rotary is a scheme now
        LanguageModel(SOURCE_VOCAB, config, positions="absolute")


def test_classifier_ignores_padding_and_returns_a_tensor():
    model = TransformerClassifier(
        SOURCE_VOCAB, CLASSES, layer=LAYER, heads=HEADS, hidden=HIDDEN
    ).eval()
    tokens = torch.randint(1, SOURCE_VOCAB, (B, SEQ))
    mask = nt.padding_mask(torch.tensor([5, 3]), SEQ)
    logits = model(tokens, mask)
    assert isinstance(logits, torch.Tensor) and logits.shape == (B, CLASSES)
    longer = torch.cat(
        [tokens, torch.randint(SOURCE_VOCAB, (B, 2))], 1
    )  # more padding, any ids
    longer_mask = nt.padding_mask(torch.tensor([5, 3]), SEQ + 2)
    torch.testing.assert_close(model(longer, longer_mask), logits, atol=1e-5, rtol=0)
    d, f = LAYER, HIDDEN
    layer = (4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d
    assert model.num_parameters() == SOURCE_VOCAB * d + layer + CLASSES * d + CLASSES
    states = torch.randn(B, SEQ, LAYER)
    torch.testing.assert_close(masked_max(states, mask)[1], states[1, :3].max(0).values)


# -------------------------------------------------------------------------- properties


@settings(max_examples=10)
@given(st.permutations(range(SEQ)), st.booleans())
def test_encoder_without_positions_is_permutation_equivariant(order, norm_first):
    torch.manual_seed(1)
    encoder = Encoder.build(
        2, LAYER, HEADS, HIDDEN, norm_first=norm_first, dropout=0.0
    ).double()
    x = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    order = torch.tensor(order)
    torch.testing.assert_close(encoder(x[:, order]), encoder(x)[:, order])


CAUSAL_MODEL = Transformer(SOURCE_VOCAB, TARGET_VOCAB, TINY).eval()


@settings(max_examples=10)
@given(st.integers(0, SEQ_Q - 1), st.integers(1, TARGET_VOCAB - 1))
def test_decoder_is_causal(position, shift):
    """Changing target token `position` changes no output before it."""
    model = CAUSAL_MODEL
    source = torch.randint(SOURCE_VOCAB, (B, SEQ))
    target = torch.randint(TARGET_VOCAB, (B, SEQ_Q))
    changed = target.clone()
    changed[:, position] = (changed[:, position] + shift) % TARGET_VOCAB
    before, after = model(source, target), model(source, changed)
    torch.testing.assert_close(after[:, :position], before[:, :position])
    assert not torch.allclose(after[:, position], before[:, position])


def test_models_reject_wrong_axis_sizes():
    tokens = torch.randint(SOURCE_VOCAB, (B, SEQ))
    model = Transformer(SOURCE_VOCAB, TARGET_VOCAB, TINY)
    enc = Encoder.build(1, LAYER, HEADS, HIDDEN)
    dec = Decoder.build(1, LAYER, HEADS, HIDDEN)
    stacks = TransformerStacks(enc, dec)
    wide = torch.randn(B, SEQ, LAYER + 1)
    checks = [
        (lambda: enc(wide), "w_q"),
        (lambda: dec(torch.randn(B, SEQ_Q, LAYER), wide), "w_k"),
        (
            lambda: stacks(
                torch.randn(B, SEQ, LAYER), torch.randn(B, SEQ_Q, LAYER + 1)
            ),
            "target",
        ),
        (
            lambda: model(tokens, tokens, torch.ones(B, 1, SEQ + 1, dtype=torch.bool)),
            "source_mask",
        ),
        (lambda: model(tokens.float(), tokens), "source"),
        (lambda: LanguageModel(SOURCE_VOCAB, TINY)(tokens[0, 0]), "tokens"),
        (
            lambda: TransformerClassifier(SOURCE_VOCAB, CLASSES)(tokens, REAL[:, :-1]),
            "mask",
        ),
        (lambda: masked_max(wide, REAL[:1, :-1]), "mask"),
    ]
    for call, argument in checks:
        with pytest.raises(TypeCheckError, match=argument):
            call()


def test_checks_off_the_language_model_compiles_with_fullgraph():
    config = TransformerConfig(
        decoder_layers=1, layer=LAYER, heads=HEADS, hidden=HIDDEN, dropout=0.0
    )
    model = LanguageModel(SOURCE_VOCAB, config).eval()
    tokens = torch.randint(SOURCE_VOCAB, (B, SEQ))
    # every checked function shares one wrapper's code: the compilations of earlier
    # tests in this process count against its limit of 8
    torch._dynamo.reset()
    with nt.shape_checks(False):
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        torch.testing.assert_close(compiled(tokens), model(tokens))


def test_torch_fast_path_zeroes_padded_positions_so_only_real_ones_are_compared():
    layer = nn.TransformerEncoderLayer(
        LAYER, 2, HIDDEN, batch_first=True
    )  # even heads: fast path
    theirs = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    ours = from_torch(theirs)
    x = torch.randn(B, SEQ, LAYER)
    with torch.no_grad():
        expected = theirs(x, src_key_padding_mask=PADDING)
        got = ours(x, mask_from_torch(None, PADDING))
    assert (
        expected[PADDING] == 0
    ).all()  # PyTorch's nested-tensor path drops padded positions
    assert (got[PADDING] != 0).any()  # ours computes them (attending the real tokens)
    torch.testing.assert_close(got[REAL], expected[REAL], atol=1e-5, rtol=0)


def test_fused_attention_config_gives_the_same_transformer_and_gradients():
    from dataclasses import replace

    named = Transformer(SOURCE_VOCAB, TARGET_VOCAB, replace(TINY, dropout=0.0)).double()
    fused = Transformer(
        SOURCE_VOCAB, TARGET_VOCAB, replace(TINY, dropout=0.0, fused_attention=True)
    ).double()
    fused.load_state_dict(named.state_dict())
    assert all(m.fused for m in fused.modules() if isinstance(m, nt.MultiHeadAttention))
    source, target = (
        torch.randint(SOURCE_VOCAB, (B, SEQ)),
        torch.randint(TARGET_VOCAB, (B, SEQ_Q)),
    )
    source_mask = nt.key_padding_mask(REAL.sum(-1), SEQ)
    results = [
        m(source, target, source_mask, nt.causal_mask(SEQ_Q)) for m in (named, fused)
    ]
    torch.testing.assert_close(results[1], results[0], atol=1e-12, rtol=0)
    grads = [
        torch.autograd.grad(r.sum(), list(m.parameters()))
        for r, m in zip(results, (named, fused), strict=True)
    ]
    for ours, reference in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(ours, reference, atol=1e-12, rtol=0)
    _, weights = recorded(
        fused, ["stacks.decoder.layers.{}.cross_attention.weights"], source, target,
        source_mask, nt.causal_mask(SEQ_Q),
    )  # named path  # fmt: skip
    assert len(weights) == TINY.decoder_layers
