"""from_torch / to_torch where the first round refused: float attention masks (an
additive score bias), kdim != vdim, GELU(tanh) and SiLU activations, layers built with
bias=False. Each against PyTorch's own module, both ways."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import named_transformer as nt
from named_transformer.interop.pytorch import (
    bias_from_torch,
    from_torch,
    mask_from_torch,
    to_torch,
)
from named_transformer.models.decoder import Decoder, DecoderLayer
from named_transformer.models.encoder import Encoder, EncoderLayer
from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.transformer import TransformerStacks
from tests.test_multihead import recorded

# a distinct size for every axis; KDIM and VDIM the keys' and the values' sources
B, SEQ_Q, SEQ, LAYER, HEADS, HIDDEN, KDIM, VDIM = 2, 3, 5, 8, 2, 6, 7, 9
PADDING = torch.tensor([[False] * SEQ, [False] * (SEQ - 2) + [True] * 2])
# PyTorch warns when a boolean padding mask meets a float attn_mask: give it floats
FLOAT_PADDING = torch.zeros(B, SEQ).masked_fill(PADDING, -torch.inf)
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def close(got, want, dtype=torch.float32):
    torch.testing.assert_close(got, want, atol=TOL[dtype], rtol=0)


def float_mask(seq_q, seq, dtype=torch.float32):
    """PyTorch's float attn_mask with arbitrary finite values: a Gaussian bias, some
    entries the dtype's most negative number (Hugging Face's fill), and query row 0
    all of it (uniform over the keys, in PyTorch and here)."""
    lowest = torch.finfo(dtype).min
    bias = 3 * torch.randn(seq_q, seq, dtype=dtype)
    bias = bias.masked_fill(torch.rand(seq_q, seq) < 0.25, lowest)
    bias[0] = lowest
    return bias


def same_state(ours, back):
    for (name, a), (_, b) in zip(
        ours.state_dict().items(), back.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name)


# ------------------------------------------------------------- float attention masks


def test_bias_from_torch_adds_the_masks_as_pytorch_does():
    blocked = torch.rand(SEQ_Q, SEQ) < 0.3
    as_float = torch.zeros(SEQ_Q, SEQ).masked_fill(blocked, -torch.inf)
    torch.testing.assert_close(bias_from_torch(blocked), as_float)
    additive = float_mask(SEQ_Q, SEQ)
    assert bias_from_torch(additive) is additive or torch.equal(
        bias_from_torch(additive), additive
    )
    merged = bias_from_torch(additive, PADDING)
    assert merged.shape == (B, SEQ_Q, SEQ)
    padding = torch.zeros(B, 1, SEQ).masked_fill(PADDING[:, None], -torch.inf)
    torch.testing.assert_close(merged, additive + padding)
    float_padding = torch.zeros(B, SEQ).masked_fill(PADDING, -torch.inf)
    torch.testing.assert_close(bias_from_torch(None, float_padding), padding)
    assert bias_from_torch(blocked, PADDING, dtype=torch.float64).dtype == torch.float64
    assert bias_from_torch(None, PADDING).dtype == torch.get_default_dtype()
    assert bias_from_torch(additive.double(), PADDING).dtype == torch.float64
    assert bias_from_torch() is None
    with pytest.raises(ValueError, match="bias_from_torch"):
        mask_from_torch(additive)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padding", [False, True], ids=["bias", "bias-and-padding"])
@pytest.mark.parametrize("fused", [False, True], ids=["named", "fused"])
def test_float_attn_mask_of_nn_multihead_attention_is_a_score_bias(
    fused, padding, dtype
):
    theirs = nn.MultiheadAttention(LAYER, HEADS, batch_first=True).to(dtype).eval()
    ours = from_torch(theirs)
    ours.fused = fused
    inputs = torch.randn(B, SEQ, LAYER, dtype=dtype)
    mask = float_mask(SEQ, SEQ, dtype)
    key_padding = FLOAT_PADDING.to(dtype) if padding else None
    want, want_weights = theirs(
        inputs, inputs, inputs, attn_mask=mask, key_padding_mask=key_padding,
        average_attn_weights=False,
    )  # fmt: skip
    bias = bias_from_torch(mask, key_padding)
    close(ours(inputs, score_bias=bias), want, dtype)
    got, weights = recorded(ours, ["weights"], inputs, score_bias=bias)
    close(got, want, dtype)
    close(weights, want_weights, dtype)


def test_float_masks_reach_cross_attention_with_kdim_and_vdim():
    theirs = nn.MultiheadAttention(
        LAYER, HEADS, kdim=KDIM, vdim=VDIM, batch_first=True
    ).eval()
    ours = from_torch(theirs)
    queries = torch.randn(B, SEQ_Q, LAYER)
    keys, values = torch.randn(B, SEQ, KDIM), torch.randn(B, SEQ, VDIM)
    mask = float_mask(SEQ_Q, SEQ)
    want, _ = theirs(
        queries, keys, values, attn_mask=mask, key_padding_mask=FLOAT_PADDING
    )
    bias = bias_from_torch(mask, PADDING)  # a boolean padding mask converts as well
    close(ours(queries, keys, values_from=values, score_bias=bias), want)


@pytest.mark.parametrize("norm_first", [False, True])
def test_float_masks_through_converted_layers_and_stacks(norm_first):
    options = {"batch_first": True, "norm_first": norm_first, "dropout": 0.0}
    encoder = nn.TransformerEncoderLayer(LAYER, HEADS, HIDDEN, **options).eval()
    decoder = nn.TransformerDecoderLayer(LAYER, HEADS, HIDDEN, **options).eval()
    stack = nn.TransformerEncoder(encoder, 2, enable_nested_tensor=False).eval()
    source, target = torch.randn(B, SEQ, LAYER), torch.randn(B, SEQ_Q, LAYER)
    source_mask, target_mask = float_mask(SEQ, SEQ), float_mask(SEQ_Q, SEQ_Q)
    memory_mask = float_mask(SEQ_Q, SEQ)
    close(
        from_torch(encoder)(source, score_bias=bias_from_torch(source_mask)),
        encoder(source, src_mask=source_mask),
    )
    close(
        from_torch(stack)(source, score_bias=bias_from_torch(source_mask)),
        stack(source, mask=source_mask),
    )
    close(
        from_torch(decoder)(
            target, source, score_bias=bias_from_torch(target_mask),
            memory_score_bias=bias_from_torch(memory_mask, PADDING),
        ),
        decoder(
            target, source, tgt_mask=target_mask, memory_mask=memory_mask,
            memory_key_padding_mask=FLOAT_PADDING,
        ),
    )  # fmt: skip
    decoders = nn.TransformerDecoder(decoder, 2).eval()
    close(
        from_torch(decoders)(
            target, source, nt.causal_mask(SEQ_Q),
            score_bias=bias_from_torch(target_mask),
        ),
        decoders(target, source, tgt_mask=target_mask.masked_fill(
            ~nt.causal_mask(SEQ_Q), -torch.inf)),
    )  # fmt: skip


def test_layers_and_stacks_reject_a_bias_of_the_wrong_size():
    from jaxtyping import TypeCheckError

    layer = EncoderLayer(LAYER, HEADS, HIDDEN)
    with pytest.raises(TypeCheckError, match="score_bias"):
        layer(torch.randn(B, SEQ, LAYER), score_bias=torch.randn(SEQ, SEQ + 1))
    decoder = Decoder.build(2, LAYER, HEADS, HIDDEN)
    target, memory = torch.randn(B, SEQ_Q, LAYER), torch.randn(B, SEQ, LAYER)
    with pytest.raises(TypeCheckError, match="memory_score_bias"):
        decoder(target, memory, memory_score_bias=torch.randn(SEQ_Q, SEQ_Q))


# --------------------------------------------------------------------------- kdim, vdim


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_kdim_and_vdim_differ_from_torch(bias, dtype):
    theirs = nn.MultiheadAttention(
        LAYER, HEADS, kdim=KDIM, vdim=VDIM, bias=bias, batch_first=True
    )
    theirs = theirs.to(dtype).eval()
    ours = from_torch(theirs)
    assert (ours.memory, ours.value_memory) == (KDIM, VDIM)
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters())
    queries = torch.randn(B, SEQ_Q, LAYER, dtype=dtype)
    keys = torch.randn(B, SEQ, KDIM, dtype=dtype)
    values = torch.randn(B, SEQ, VDIM, dtype=dtype)
    want, want_weights = theirs(
        queries, keys, values, key_padding_mask=PADDING, average_attn_weights=False
    )
    got, weights = recorded(
        ours, ["weights"], queries, keys, mask_from_torch(None, PADDING),
        values_from=values,
    )  # fmt: skip
    close(got, want, dtype)
    close(weights, want_weights, dtype)


@pytest.mark.parametrize("bias", [True, False])
def test_kdim_and_vdim_differ_to_torch_and_back(bias):
    ours = MultiHeadAttention(
        LAYER, HEADS, memory=KDIM, value_memory=VDIM, bias=bias
    ).eval()
    theirs = to_torch(ours)
    assert (theirs.kdim, theirs.vdim, theirs._qkv_same_embed_dim) == (KDIM, VDIM, False)
    queries = torch.randn(B, SEQ_Q, LAYER)
    keys, values = torch.randn(B, SEQ, KDIM), torch.randn(B, SEQ, VDIM)
    want, _ = theirs(queries, keys, values)
    close(ours(queries, keys, values_from=values), want)
    same_state(ours, from_torch(theirs))


def test_values_as_wide_as_the_layer_with_keys_of_another_width():
    """vdim == embed_dim != kdim: PyTorch still keeps separate projections."""
    theirs = nn.MultiheadAttention(LAYER, HEADS, kdim=KDIM, batch_first=True).eval()
    ours = from_torch(theirs)
    assert (ours.memory, ours.value_memory) == (KDIM, LAYER)
    queries, keys = torch.randn(B, SEQ_Q, LAYER), torch.randn(B, SEQ, KDIM)
    values = torch.randn(B, SEQ, LAYER)
    close(ours(queries, keys, values_from=values), theirs(queries, keys, values)[0])
    same_state(ours, from_torch(to_torch(ours)))


# ------------------------------------------------------------------------ activations

ACTIVATIONS = {
    "GELU(tanh)": (lambda: nn.GELU(approximate="tanh"), "gelu_tanh"),
    "F.silu": (lambda: F.silu, "silu"),
    "nn.SiLU": (lambda: nn.SiLU(), "silu"),
    "string gelu": (lambda: "gelu", "gelu"),
}


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_activations_convert_from_torch(activation, kind):
    make, name = ACTIVATIONS[activation]
    layer = (
        nn.TransformerEncoderLayer if kind == "encoder" else nn.TransformerDecoderLayer
    )
    theirs = layer(
        LAYER, HEADS, HIDDEN, activation=make(), batch_first=True, dtype=torch.float64
    ).eval()
    ours = from_torch(theirs)
    assert ours.feed_forward.activation == name
    source = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    if kind == "encoder":
        close(ours(source), theirs(source), torch.float64)
    else:
        target = torch.randn(B, SEQ_Q, LAYER, dtype=torch.float64)
        close(ours(target, source), theirs(target, source), torch.float64)


def test_pytorch_fast_path_computes_exact_gelu_for_gelu_tanh():
    """A PyTorch quirk the interop docstring warns of: eval mode without autograd
    takes the encoder's fast path, which reads any nn.GELU as the exact GELU."""
    theirs = nn.TransformerEncoderLayer(
        LAYER, HEADS, HIDDEN, activation=nn.GELU(approximate="tanh"), batch_first=True
    ).eval()
    ours, source = from_torch(theirs), torch.randn(B, SEQ, LAYER)
    close(ours(source), theirs(source))  # PyTorch's slow path: the tanh GELU
    exact = from_torch(theirs)
    exact.feed_forward.activation = "gelu"
    with torch.no_grad():
        close(exact(source), theirs(source))  # the fast path: the exact GELU


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
@pytest.mark.parametrize("name", ["gelu_tanh", "silu"])
def test_activations_convert_to_torch(name, kind):
    layer = EncoderLayer if kind == "encoder" else DecoderLayer
    ours = layer(LAYER, HEADS, HIDDEN, activation=name).eval()
    theirs = to_torch(ours)
    expected = {"gelu_tanh": "GELU(approximate='tanh')", "silu": "SiLU()"}[name]
    assert repr(theirs.activation) == expected
    source = torch.randn(B, SEQ, LAYER)
    if kind == "encoder":
        close(ours(source), theirs(source))
    else:
        target = torch.randn(B, SEQ_Q, LAYER)
        close(ours(target, source), theirs(target, source))
    back = from_torch(theirs)
    assert back.feed_forward.activation == name
    same_state(ours, back)


# ------------------------------------------------------------------------ bias=False


def built_without_biases(kind, norm_first):
    options = {"norm_first": norm_first, "bias": False}
    return {
        "attention": lambda: MultiHeadAttention(LAYER, HEADS, bias=False),
        "encoder_layer": lambda: EncoderLayer(LAYER, HEADS, HIDDEN, **options),
        "decoder_layer": lambda: DecoderLayer(LAYER, HEADS, HIDDEN, **options),
        "encoder": lambda: Encoder.build(
            2, LAYER, HEADS, HIDDEN, final_norm=True, **options
        ),
        "decoder": lambda: Decoder.build(
            2, LAYER, HEADS, HIDDEN, final_norm=True, **options
        ),
        "transformer": lambda: TransformerStacks(
            Encoder.build(2, LAYER, HEADS, HIDDEN, final_norm=True, **options),
            Decoder.build(1, LAYER, HEADS, HIDDEN, final_norm=True, **options),
        ),
    }[kind]()


def torch_without_biases(kind, norm_first):
    options = {"batch_first": True, "norm_first": norm_first, "bias": False}
    encoder_layer = nn.TransformerEncoderLayer(LAYER, HEADS, HIDDEN, **options)
    decoder_layer = nn.TransformerDecoderLayer(LAYER, HEADS, HIDDEN, **options)
    final = nn.LayerNorm(LAYER, bias=False)
    return {
        "attention": lambda: nn.MultiheadAttention(
            LAYER, HEADS, bias=False, batch_first=True
        ),
        "encoder_layer": lambda: encoder_layer,
        "decoder_layer": lambda: decoder_layer,
        "encoder": lambda: nn.TransformerEncoder(
            encoder_layer, 2, final, enable_nested_tensor=False
        ),
        "decoder": lambda: nn.TransformerDecoder(decoder_layer, 2, final),
        "transformer": lambda: nn.Transformer(LAYER, HEADS, 2, 1, HIDDEN, **options),
    }[kind]()


def run_both(kind, ours, theirs):
    source, target = torch.randn(B, SEQ, LAYER), torch.randn(B, SEQ_Q, LAYER)
    causal = nt.causal_mask(SEQ_Q)
    keys = mask_from_torch(None, PADDING)
    if kind == "attention":
        return ours(target, source, keys), theirs(
            target, source, source, key_padding_mask=PADDING
        )[0]
    if kind.startswith("encoder"):
        got, want = ours(source, keys), theirs(source, src_key_padding_mask=PADDING)
        return got[~PADDING], want[~PADDING]
    if kind.startswith("decoder"):
        return ours(target, source, causal, keys), theirs(
            target, source, tgt_mask=~causal, memory_key_padding_mask=PADDING
        )
    return ours(source, target, keys, causal, keys), theirs(
        source, target, tgt_mask=~causal, src_key_padding_mask=PADDING,
        memory_key_padding_mask=PADDING,
    )  # fmt: skip


KINDS = ["attention", "encoder_layer", "decoder_layer", "encoder", "decoder"]


def biases_and_betas(module):
    return [
        name
        for name, parameter in module.named_parameters()
        if name.endswith(("bias", "beta", "b1", "b2", "b_q", "b_k", "b_v", "b_o"))
        and parameter is not None
    ]


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("kind", [*KINDS, "transformer"])
def test_bias_false_converts_from_torch(kind, norm_first):
    theirs = torch_without_biases(kind, norm_first).eval()
    ours = from_torch(theirs)
    assert biases_and_betas(ours) == [] and biases_and_betas(theirs) == []
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters())
    close(*run_both(kind, ours, theirs))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("kind", [*KINDS, "transformer"])
def test_bias_false_converts_to_torch_and_back(kind, norm_first):
    ours = built_without_biases(kind, norm_first).eval()
    assert biases_and_betas(ours) == []
    theirs = to_torch(ours).eval()
    assert biases_and_betas(theirs) == []
    assert sum(p.numel() for p in theirs.parameters()) == ours.num_parameters()
    close(*run_both(kind, ours, theirs))
    back = from_torch(theirs)
    assert type(back) is type(ours)
    same_state(ours, back)


def test_a_layer_without_biases_has_no_additive_parameter():
    layer = EncoderLayer(LAYER, HEADS, HIDDEN, bias=False)
    with_biases = EncoderLayer(LAYER, HEADS, HIDDEN)
    # attention 4 layer-wide biases, feed-forward hidden + layer, two LayerNorm betas
    missing = 4 * LAYER + HIDDEN + LAYER + 2 * LAYER
    assert layer.num_parameters() == with_biases.num_parameters() - missing
    assert layer.attention_residual.norm.beta is None
    stack = Decoder.build(2, LAYER, HEADS, HIDDEN, final_norm=True, bias=False)
    assert stack.norm.beta is None and stack.layers[1].cross_attention.b_o is None
