"""from_torch / to_torch for the six kinds: round trips, batch_first, masks,
refusals."""

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

import named_transformer as nt
from named_transformer.interop.pytorch import from_torch, mask_from_torch, to_torch
from named_transformer.models.config import TransformerConfig
from named_transformer.models.decoder import Decoder, DecoderLayer
from named_transformer.models.encoder import Encoder, EncoderLayer
from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.sublayers import LayerNorm
from named_transformer.models.transformer import TransformerStacks

B, SEQ_Q, SEQ, LAYER, HEADS, HIDDEN, MEMORY = 2, 3, 5, 8, 2, 6, 7
PADDING = torch.tensor([[False] * SEQ, [False] * (SEQ - 1) + [True]])
REAL = ~PADDING
TINY = TransformerConfig(
    encoder_layers=2, decoder_layers=1, layer=LAYER, heads=HEADS, hidden=HIDDEN
)


def build(kind, norm_first=False, activation="relu"):
    options = {"norm_first": norm_first, "activation": activation}
    return {
        "attention": lambda: MultiHeadAttention(LAYER, HEADS, memory=MEMORY),
        "encoder_layer": lambda: EncoderLayer(LAYER, HEADS, HIDDEN, **options),
        "decoder_layer": lambda: DecoderLayer(LAYER, HEADS, HIDDEN, **options),
        "encoder": lambda: Encoder.build(
            2, LAYER, HEADS, HIDDEN, final_norm=True, **options
        ),
        "decoder": lambda: Decoder.build(3, LAYER, HEADS, HIDDEN, **options),
        "transformer": lambda: TransformerStacks.build(
            TransformerConfig(**{**TINY.__dict__, **options, "final_norm": True})
        ),
    }[kind]()


def call_both(kind, ours, theirs, dtype):
    """The same computation through both modules: our masks True = may attend, theirs
    negated."""
    source, memory = (
        torch.randn(B, SEQ, LAYER, dtype=dtype),
        torch.randn(B, SEQ, MEMORY, dtype=dtype),
    )
    target = torch.randn(B, SEQ_Q, LAYER, dtype=dtype)
    causal, keys = nt.causal_mask(SEQ_Q), mask_from_torch(None, PADDING)
    if kind == "attention":
        return ours(target, memory, keys), theirs(
            target, memory, memory, key_padding_mask=PADDING
        )[0]
    if kind.startswith("encoder"):
        got, want = ours(source, keys), theirs(source, src_key_padding_mask=PADDING)
        return got[REAL], want[REAL]
    if kind.startswith("decoder"):
        return ours(target, source, causal, keys), theirs(
            target, source, tgt_mask=~causal, memory_key_padding_mask=PADDING
        )
    return ours(source, target, keys, causal, keys), theirs(
        source,
        target,
        tgt_mask=~causal,
        src_key_padding_mask=PADDING,
        memory_key_padding_mask=PADDING,
    )


KINDS = [
    "attention",
    "encoder_layer",
    "decoder_layer",
    "encoder",
    "decoder",
    "transformer",
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_to_torch_computes_the_same_and_converts_back(kind, dtype):
    ours = build(kind, norm_first=kind != "decoder", activation="gelu").to(dtype).eval()
    theirs = to_torch(ours).eval()
    assert next(theirs.parameters()).dtype == dtype
    assert sum(p.numel() for p in theirs.parameters()) == ours.num_parameters()
    got, want = call_both(kind, ours, theirs, dtype)
    torch.testing.assert_close(
        got, want, atol={torch.float32: 1e-5, torch.float64: 1e-10}[dtype], rtol=0
    )
    back = from_torch(theirs)
    assert type(back) is type(ours)
    for (name, a), (_, b) in zip(
        ours.state_dict().items(), back.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name)


def test_batch_second_torch_modules_convert_with_the_same_weights():
    theirs = nn.TransformerEncoderLayer(LAYER, HEADS, HIDDEN, batch_first=False).eval()
    ours = from_torch(theirs)
    x = torch.randn(B, SEQ, LAYER)
    expected = theirs(rearrange(x, "batch seq layer -> seq batch layer"))
    expected = rearrange(expected, "seq batch layer -> batch seq layer")
    torch.testing.assert_close(ours(x), expected, atol=1e-5, rtol=0)
    assert to_torch(ours, batch_first=False).self_attn.batch_first is False


def test_mode_and_dtype_follow_the_source_module():
    theirs = nn.MultiheadAttention(LAYER, HEADS, dropout=0.2).double().train()
    ours = from_torch(theirs)
    assert ours.training and ours.dropout == 0.2 and ours.w_q.dtype == torch.float64
    assert from_torch(theirs.eval()).training is False


def test_mask_from_torch_flips_and_merges():
    blocked = ~nt.causal_mask(SEQ_Q, SEQ, offset=2)  # PyTorch: True = blocked
    torch.testing.assert_close(mask_from_torch(blocked), ~blocked)
    additive = torch.zeros(SEQ_Q, SEQ).masked_fill(blocked, -torch.inf)
    torch.testing.assert_close(mask_from_torch(additive), ~blocked)
    merged = mask_from_torch(blocked, PADDING)
    assert merged.shape == (B, SEQ_Q, SEQ)
    torch.testing.assert_close(merged, ~blocked & REAL[:, None, :])
    float_padding = torch.zeros(B, SEQ).masked_fill(PADDING, -torch.inf)
    torch.testing.assert_close(mask_from_torch(None, float_padding), REAL[:, None, :])
    assert mask_from_torch() is None
    with pytest.raises(ValueError, match="0 or -inf"):
        mask_from_torch(torch.randn(SEQ_Q, SEQ))


def test_what_does_not_convert_says_why():
    with pytest.raises(ValueError, match="add_bias_kv"):
        from_torch(nn.MultiheadAttention(LAYER, HEADS, add_bias_kv=True))
    with pytest.raises(ValueError, match="add_zero_attn"):
        from_torch(nn.MultiheadAttention(LAYER, HEADS, add_zero_attn=True))
    with pytest.raises(ValueError, match="activation"):
        from_torch(nn.TransformerEncoderLayer(LAYER, HEADS, HIDDEN, activation=F.tanh))
    with pytest.raises(ValueError, match="activation"):
        from_torch(
            nn.TransformerEncoderLayer(LAYER, HEADS, HIDDEN, activation=nn.LeakyReLU())
        )
    no_weight = nn.TransformerEncoderLayer(LAYER, HEADS, HIDDEN)
    no_weight.norm2 = nn.LayerNorm(LAYER, elementwise_affine=False)
    with pytest.raises(ValueError, match="elementwise_affine"):
        from_torch(no_weight)
    with pytest.raises(ValueError, match="narrow"):
        to_torch(MultiHeadAttention(LAYER, HEADS, wide=True))
    with pytest.raises(ValueError, match="memory"):
        to_torch(DecoderLayer(LAYER, HEADS, HIDDEN, memory=MEMORY))
    with pytest.raises(TypeError, match="Linear"):
        from_torch(nn.Linear(2, 3))
    with pytest.raises(TypeError, match="LayerNorm"):
        to_torch(LayerNorm(LAYER))
