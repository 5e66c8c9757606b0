"""Converters and position schemes: PyTorch's modules have no rotary, ALiBi or
relative positions, so ``to_torch`` refuses a module with one at every level (one
line naming the scheme and why) where it used to return a plain
``nn.MultiheadAttention`` computing something else; without one it still converts
and computes the same. ``export_onnx`` traces the module, so its graph keeps the
scheme: the exported model computes what the named one does."""

import pytest
import torch

import named_transformer as nt
from named_transformer.interop.huggingface import to_huggingface
from named_transformer.interop.pytorch import mask_from_torch, to_torch
from named_transformer.models.config import TransformerConfig
from named_transformer.models.decoder import Decoder, DecoderLayer
from named_transformer.models.encoder import Encoder, EncoderLayer
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.text_encoder import TextEncoder
from named_transformer.models.transformer import TransformerStacks
from named_transformer.models.variants import (
    NO_POSITIONS,
    SCHEMES,
    position_scheme,
)
from tests.test_multihead import recorded

B, SEQ, LAYER, HEADS, HIDDEN, VOCAB, DISTANCE = 2, 5, 8, 2, 6, 11, 2
TINY = TransformerConfig(
    encoder_layers=2, decoder_layers=2, layer=LAYER, heads=HEADS, hidden=HIDDEN,
    dropout=0.0,
)  # fmt: skip
_PROBE = MultiHeadAttention(LAYER, HEADS)
#: every registered scheme that gives the attention a part of its own
POSITION_SCHEMES = [
    kind
    for kind, scheme in SCHEMES.items()
    if scheme().part(_PROBE) is not NO_POSITIONS
]
#: each of them both ways (ALiBi: causal and symmetric)
BOTH_WAYS = [(name, causal) for name in POSITION_SCHEMES for causal in (True, False)]


def attention(name, causal, **options):
    scheme = position_scheme(name, max_distance=DISTANCE).within(causal)
    return MultiHeadAttention(
        LAYER, HEADS, dropout=0.0, positions=scheme, **options
    ).double()


def with_scheme(model, name, causal):
    """``model`` with its last layer's self-attention (only) of the scheme: the
    refusal must find it however deep it is."""
    layers = model.layers if hasattr(model, "layers") else [model]
    layers[-1].self_attention = attention(name, causal)
    return model.double()


def levels(name, causal):
    def stacks():
        model = TransformerStacks.build(TINY)
        with_scheme(model.decoder, name, causal)
        return model.double()

    return {
        "attention": lambda: attention(name, causal),
        "encoder layer": lambda: with_scheme(
            EncoderLayer(LAYER, HEADS, HIDDEN), name, causal
        ),
        "encoder": lambda: with_scheme(
            Encoder.build(2, LAYER, HEADS, HIDDEN), name, causal
        ),
        "decoder layer": lambda: with_scheme(
            DecoderLayer(LAYER, HEADS, HIDDEN), name, causal
        ),
        "decoder": lambda: with_scheme(
            Decoder.build(2, LAYER, HEADS, HIDDEN), name, causal
        ),
        "transformer": stacks,
        "language model": lambda: LanguageModel(
            VOCAB, TINY, positions=name, max_distance=DISTANCE
        ).double(),
        "language model's blocks": lambda: (
            LanguageModel(VOCAB, TINY, positions=name, max_distance=DISTANCE)
            .double()
            .blocks
        ),
    }


LEVELS = list(levels("rotary", True))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("name", "causal"), BOTH_WAYS)
def test_to_torch_refuses_a_position_scheme_in_one_line_naming_it(name, causal, level):
    module = levels(name, causal)[level]()
    scheme = attention(name, causal).position_scheme().name
    with pytest.raises(ValueError) as refused:
        to_torch(module)
    message = str(refused.value)
    assert "\n" not in message
    assert f"{scheme} positions" in message
    assert "cannot express rotary, ALiBi or relative positions" in message


@pytest.mark.parametrize(("name", "causal"), BOTH_WAYS)
def test_what_to_torch_used_to_return_computes_something_else(name, causal):
    """Why the refusal: the same weights in plain attention (what to_torch returned)
    give other outputs, so the module it returned was wrong, not merely different."""
    ours = attention(name, causal).eval()
    plain = MultiHeadAttention(LAYER, HEADS).double().eval()
    plain.load_state_dict(ours.state_dict(), strict=False)
    x = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    assert (ours(x) - plain(x)).abs().max() > 1e-3


def test_without_a_scheme_every_level_still_converts_and_computes_the_same():
    """The control: plain attention, a language model's blocks built with learned
    positions (added to the embeddings, outside the blocks) convert and agree to
    1e-12 in float64."""
    x = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    padding = torch.tensor([[False] * SEQ, [False] * (SEQ - 1) + [True]])
    plain = MultiHeadAttention(LAYER, HEADS).double().eval()
    theirs = to_torch(plain).eval()
    keys = mask_from_torch(None, padding)
    got = plain(x, mask=keys)
    want = theirs(x, x, x, key_padding_mask=padding)[0]
    assert (got - want).abs().max() < 1e-12
    blocks = LanguageModel(VOCAB, TINY, positions="learned").double().eval().blocks
    causal = torch.ones(SEQ, SEQ, dtype=torch.bool).tril()
    got = blocks(x, causal)
    want = to_torch(blocks).eval()(x, mask=~causal)
    assert (got - want).abs().max() < 1e-12


def _gpt2(**options):
    config = TransformerConfig(**{**TINY.__dict__, "norm_first": True, **options})
    return LanguageModel(
        VOCAB, config, positions="learned", scale_embeddings=False, max_positions=16
    ).double()


def _bert(**options):
    return TextEncoder(VOCAB, TransformerConfig(**{**TINY.__dict__, **options}))


def _llama(**options):
    config = TransformerConfig.llama(**{**TINY.__dict__, **options})
    return LanguageModel(
        VOCAB, config, positions="rotary", scale_embeddings=False, max_positions=16
    ).double()


def _schemed(model, name, layer=0):
    """``model`` with one layer's self-attention of the scheme ``name``."""
    scheme = attention(name, True, bias=model.config.bias)
    model.blocks.layers[layer].self_attention = scheme
    return model.double()


#: (model, the refusal's words): each used to convert to a model that computes
#: something else (a window GPT-2 ignores, positions its attention has not) or to fail
#: with a KeyError or a size mismatch
REFUSED = {
    "GPT-2 with a window": (lambda: _gpt2(window=2), "GPT-2 has no sliding window"),
    "GPT-2 with grouped heads": (
        lambda: _gpt2(kv_heads=1),
        "GPT-2 has as many key/value heads",
    ),
    "GPT-2 without biases": (lambda: _gpt2(bias=False), "GPT-2 has every bias"),
    "GPT-2 without q/k/v biases": (
        lambda: _gpt2(qkv_bias=False),
        "GPT-2 has every bias",
    ),
    "BERT with grouped heads": (
        lambda: _bert(kv_heads=1),
        "BERT has as many key/value heads",
    ),
    "BERT without biases": (lambda: _bert(bias=False), "BERT has every bias"),
    "BERT with RMSNorm": (lambda: _bert(norm="rms"), "BERT has LayerNorm"),
    "BERT gated": (
        lambda: _bert(feed_forward="gated", activation="silu"),
        "BERT has LayerNorm",
    ),
    **{
        f"GPT-2 with {name} attention": (
            lambda name=name: _schemed(_gpt2(), name),
            "positions and GPT-2's attention has none",
        )
        for name in POSITION_SCHEMES
        if name != "rotary"
    },  # a rotary first layer makes it Llama's, refused as not Llama-like
    **{
        f"BERT with {name} attention": (
            lambda name=name: _schemed(_bert(), name),
            "positions and BERT's attention has none",
        )
        for name in POSITION_SCHEMES
    },
    **{
        f"Llama with a {name} layer": (
            lambda name=name: _schemed(_llama(), name, layer=1),
            "where Llama's attention is rotary of base 10000.0 in every layer",
        )
        for name in POSITION_SCHEMES
        if name != "rotary"
    },
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_to_huggingface_refuses_what_the_reference_would_drop(case):
    build, words = REFUSED[case]
    with pytest.raises(ValueError, match="does not convert to transformers") as error:
        to_huggingface(build())
    assert words in str(error.value) and "\n" not in str(error.value)


def test_to_huggingface_still_converts_gpt2_and_computes_the_same():
    """The control: a GPT-2-like model converts and its log-probabilities equal the
    reference's to 1e-12 in float64."""
    ours = _gpt2().eval()
    theirs = to_huggingface(ours).double().eval()
    tokens = torch.randint(VOCAB, (B, SEQ))
    with torch.no_grad():
        want = torch.log_softmax(theirs(tokens).logits, dim=-1)
        assert (ours(tokens) - want).abs().max() < 1e-12


def test_export_onnx_keeps_every_position_scheme(tmp_path):
    """export_onnx traces the module, so each scheme is in the graph. One model holds
    them all, one scheme's self-attention a layer (ALiBi, relative, rotary: each
    layer's attention weights are an output of their own), so one export checks
    every scheme: onnxruntime's log-probabilities and every layer's attention weights
    equal the named model's at sizes other than the traced ones (float64;
    onnxruntime's float64 kernels differ from PyTorch's by about 1e-7, with or
    without a scheme), where the same weights without the schemes differ by far
    more. (It was one export a scheme, each a one-layer model with the scheme as its
    ``positions``.)"""
    pytest.importorskip("onnxruntime")
    config = TransformerConfig(
        **{**TINY.__dict__, "decoder_layers": len(POSITION_SCHEMES)}
    )
    torch.manual_seed(0)
    ours = LanguageModel(VOCAB, config, positions="sinusoidal")
    for layer, name in zip(ours.blocks.layers, POSITION_SCHEMES, strict=True):
        layer.self_attention = attention(name, causal=True)
    ours = ours.double().eval()
    kinds = {"alibi": "LinearBiases", "relative": "RelativeTables", "rotary": "Rotary"}
    assert [
        type(layer.self_attention.positions).__name__ for layer in ours.blocks.layers
    ] == [kinds[n] for n in POSITION_SCHEMES]
    plain = LanguageModel(VOCAB, config, positions="sinusoidal").double().eval()
    plain.load_state_dict(ours.state_dict(), strict=False)
    nt.export_onnx(ours, tmp_path / "model.onnx")
    tokens = torch.randint(VOCAB, (3, 9))
    outputs = list(nt.run_onnx(tmp_path / "model.onnx", tokens).values())
    with torch.no_grad():
        log_probs, weights = recorded(
            ours, ["blocks.layers.{}.self_attention.weights"], tokens
        )
        without = plain(tokens)
    assert len(outputs) == 1 + len(POSITION_SCHEMES) == 1 + len(weights)
    assert (outputs[0] - log_probs).abs().max() < 1e-6
    for got, want in zip(outputs[1:], weights, strict=True):
        assert (got - want).abs().max() < 1e-6
    assert (without - log_probs).abs().max() > 1e-3


@pytest.mark.parametrize(
    "options", [{"qkv_bias": False}, {"bias": False, "qkv_bias": True}]
)
def test_to_torch_refuses_qkv_biases_apart_from_the_output_bias(options):
    with pytest.raises(ValueError, match=r"qkv_bias != bias\) have no nn\.Multihead"):
        to_torch(MultiHeadAttention(LAYER, HEADS, **options))
