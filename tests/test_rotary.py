"""Rotary positions (RoPE, Su et al. 2021): the rotation against complex multiplication
and against Hugging Face Llama's apply_rotary_pos_emb, the relative-position property,
the module against an explicit computation, cached and compiled decoding."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from einops import einsum
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import TypeCheckError

import named_transformer as nt
from named_transformer.core.rotary import rotary_angles, rotary_frequencies, rotate
from named_transformer.decoding import IncrementalDecoder, greedy
from named_transformer.decoding.compiled import CompiledDecoder
from named_transformer.models.multihead import MultiHeadAttention, multihead
from named_transformer.models.rotary import (
    Rotary,
    rotate_heads,
)
from named_transformer.workflows.runner import build_model, make_spec
from tests.test_decoding import VOCAB
from tests.test_multihead import recorded

B, HEADS, SEQ_Q, SEQ, KEY, LAYER = 2, 3, 4, 6, 10, 30  # key = 10: 5 pairs


def complex_rotation(inputs, positions, base=10000.0):
    """Independent form: pair i = (x_i, x_{i+|key|/2}) as x_i + i·x_{i+|key|/2},
    multiplied by e^{i·s·θ_i}, θ_i = base^(-2i/|key|)."""
    key = inputs.shape[-1]
    half = key // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) * 2 / key)
    phase = torch.polar(
        torch.ones(len(positions), half, dtype=torch.float64),
        positions.double()[:, None] * theta,
    )
    pairs = torch.stack([inputs[..., :half], inputs[..., half:]], -1)
    turned = torch.view_as_real(torch.view_as_complex(pairs.contiguous()) * phase)
    return torch.cat([turned[..., 0], turned[..., 1]], -1)


@settings(deadline=None, max_examples=20)
@given(
    seq=st.integers(1, 7),
    half=st.integers(1, 6),
    offset=st.integers(0, 50),
    base=st.sampled_from([10000.0, 500.0]),
)
def test_rotate_equals_complex_multiplication(seq, half, offset, base):
    inputs = torch.randn(B, HEADS, seq, 2 * half, dtype=torch.float64)
    angles = rotary_angles(seq, 2 * half, offset=offset, base=base, dtype=torch.float64)
    expected = complex_rotation(inputs, torch.arange(offset, offset + seq), base)
    torch.testing.assert_close(rotate(inputs, angles), expected, atol=1e-12, rtol=0)


def test_angles_are_position_times_frequency_and_offset_slices_the_table():
    theta = rotary_frequencies(KEY, dtype=torch.float64)
    expected = 10000.0 ** (-torch.arange(0, KEY, 2, dtype=torch.float64) / KEY)
    torch.testing.assert_close(theta, expected, atol=1e-15, rtol=0)
    table = rotary_angles(SEQ, KEY, dtype=torch.float64)
    torch.testing.assert_close(table, torch.arange(SEQ)[:, None] * theta)
    assert torch.equal(rotary_angles(2, KEY, offset=3, dtype=torch.float64), table[3:5])
    as_tensor = rotary_angles(1, KEY, offset=torch.tensor([4]), dtype=torch.float64)
    assert torch.equal(as_tensor, table[4:5])  # the compiled decoder's position


@settings(deadline=None, max_examples=25)
@given(
    s=st.integers(0, 40),
    t=st.integers(0, 40),
    shift=st.integers(-40, 200),
    seed=st.integers(0, 2**16),
)
def test_the_score_depends_only_on_the_distance(s, t, shift, seed):
    """R_s(q) ⊙_key R_t(k) = R_{s+d}(q) ⊙_key R_{t+d}(k) for every shift d."""
    shift = max(shift, -min(s, t))  # positions stay >= 0
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, B, 1, KEY, dtype=torch.float64, generator=generator)

    def score(s, t):
        rq = rotate(q, rotary_angles(1, KEY, offset=s, dtype=torch.float64))
        rk = rotate(k, rotary_angles(1, KEY, offset=t, dtype=torch.float64))
        return einsum(rq, rk, "b seq_q key, b seq key -> b seq_q seq")

    torch.testing.assert_close(
        score(s, t), score(s + shift, t + shift), atol=1e-10, rtol=0
    )
    # and the whole score matrix of a shifted sequence is unchanged
    qs, ks = torch.randn(2, B, SEQ, KEY, dtype=torch.float64, generator=generator)

    def scores(offset):
        angles = rotary_angles(SEQ, KEY, offset=offset, dtype=torch.float64)
        return nt.dot_score(rotate(qs, angles), rotate(ks, angles))

    torch.testing.assert_close(scores(s), scores(t), atol=1e-10, rtol=0)


def test_rotation_keeps_the_norm_and_position_zero_is_the_identity():
    x = torch.randn(B, SEQ, KEY, dtype=torch.float64)
    rotated = rotate(x, rotary_angles(SEQ, KEY, offset=7, dtype=torch.float64))
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    at_zero = rotate(x[:, :1], rotary_angles(1, KEY, dtype=torch.float64))
    torch.testing.assert_close(at_zero, x[:, :1], atol=0, rtol=0)


def test_equals_hugging_face_llama_apply_rotary_pos_emb():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = LlamaConfig(
        hidden_size=HEADS * 16, num_attention_heads=HEADS, head_dim=16,
        max_position_embeddings=64,
    )  # fmt: skip
    offset, seq = 5, 9  # positions 5 … 13, as after a cache of five
    q = torch.randn(B, HEADS, seq, 16)
    k = torch.randn(B, HEADS, seq, 16)
    positions = torch.arange(offset, offset + seq).expand(B, seq)
    cos, sin = LlamaRotaryEmbedding(config=config)(q, positions)
    theirs_q, theirs_k = apply_rotary_pos_emb(q, k, cos, sin)
    angles = rotary_angles(
        seq, 16, offset=offset, base=config.rope_parameters["rope_theta"]
    )
    ours_q, ours_k = rotate(q, angles), rotate(k, angles)
    assert (ours_q - theirs_q).abs().max() <= 1e-6
    assert (ours_k - theirs_k).abs().max() <= 1e-6
    torch.testing.assert_close(rotate_heads(q, offset=offset), ours_q)


def test_odd_key_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="must be even"):
        rotary_angles(4, 5)
    with pytest.raises(ValueError, match="must be even"):
        rotate(torch.randn(2, 4, 5), torch.randn(4, 2))
    with pytest.raises(ValueError, match="odd"):
        MultiHeadAttention(6, 2, positions=Rotary())  # |key| = 3
    with pytest.raises(ValueError, match="base"):
        Rotary(base=1.0)
    MultiHeadAttention(6, 2, key=4, positions=Rotary())  # an explicit even key


def test_wrong_sizes_name_the_argument():
    x = torch.randn(B, SEQ, KEY)
    with pytest.raises(TypeCheckError, match="parameter 'angles'"):
        rotate(x, rotary_angles(SEQ + 1, KEY))  # one position too many
    with pytest.raises(TypeCheckError, match="parameter 'angles'"):
        rotate(x, rotary_angles(SEQ, KEY + 2))  # pairs != |key|/2
    m = MultiHeadAttention(LAYER, HEADS, positions=Rotary())
    with pytest.raises(TypeCheckError, match="w_q"):
        m(torch.randn(B, SEQ, LAYER + 1))


def explicit(m, inputs, memory, offset=0, mask=None):
    """Project, rotate each head's queries and keys by the complex form, attend."""
    q = einsum(inputs, m.w_q, "b s l, h l k -> b h s k") + m.b_q[:, None]
    k = einsum(memory, m.w_k, "b s l, h l k -> b h s k") + m.b_k[:, None]
    v = einsum(memory, m.w_v, "b s l, h l k -> b h s k") + m.b_v[:, None]
    q = complex_rotation(q, torch.arange(offset, offset + inputs.shape[1]))
    k = complex_rotation(k, torch.arange(memory.shape[1]))
    scores = q @ k.transpose(-1, -2) / math.sqrt(m.key)
    if mask is not None:
        scores = scores.masked_fill(~mask, -torch.inf)
    heads = torch.softmax(scores, -1) @ v
    return einsum(heads, m.w_o, "b h s v, h v l -> b s l") + m.b_o


def model(base=10000.0, **options):
    m = MultiHeadAttention(LAYER, HEADS, positions=Rotary(base), **options).double()
    with torch.no_grad():
        for b in (m.b_q, m.b_k, m.b_v, m.b_o):
            b.normal_()
    return m


@pytest.mark.parametrize(
    "seq_q, offset, causal",
    [(SEQ, 0, False), (SEQ, 0, True), (SEQ_Q, SEQ - SEQ_Q, True), (SEQ_Q, 1, False)],
)
def test_module_equals_the_explicit_computation(seq_q, offset, causal):
    m = model()
    memory = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    inputs = memory[:, offset : offset + seq_q]
    mask = nt.causal_mask(seq_q, SEQ, offset=offset) if causal else None
    got, weights = recorded(m, ["weights"], inputs, memory, mask, offset=offset)
    expected = explicit(m, inputs, memory, offset, mask)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    assert weights.shape == (B, HEADS, seq_q, SEQ)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, HEADS, seq_q).double())


def test_multi_query_keys_are_rotated_like_the_queries():
    m = model(kv_heads=1)  # one key/value head shared by the three query heads
    assert m.w_k.shape[0] == 1
    memory = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    mask = nt.causal_mask(SEQ_Q, SEQ, offset=SEQ - SEQ_Q)
    inputs = memory[:, SEQ - SEQ_Q :]
    got = m(inputs, memory, mask, offset=SEQ - SEQ_Q)
    expected = explicit(m, inputs, memory, SEQ - SEQ_Q, mask)  # broadcasts K and V
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    m.fused = True
    torch.testing.assert_close(
        m(inputs, memory, mask, offset=SEQ - SEQ_Q), expected, atol=1e-12, rtol=0
    )


def test_fused_equals_named_and_cached_step_equals_the_last_row():
    m = model()
    inputs = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    mask = nt.causal_mask(SEQ)
    full = m(inputs, mask=mask)
    m.fused = True
    torch.testing.assert_close(m(inputs, mask=mask), full, atol=1e-12, rtol=0)
    last = m(inputs[:, -1:], inputs, offset=SEQ - 1)
    torch.testing.assert_close(last, full[:, -1:], atol=1e-12, rtol=0)


def test_no_new_parameters_and_zero_angles_are_plain_attention():
    m = model()
    assert m.num_parameters() == MultiHeadAttention(LAYER, HEADS).num_parameters()
    inputs = torch.randn(B, 1, LAYER, dtype=torch.float64)  # one position: angle 0
    torch.testing.assert_close(m(inputs), MultiHeadAttention.forward(m, inputs))


def test_gradcheck():
    d = torch.float64
    x = torch.randn(2, 3, 4, dtype=d, requires_grad=True)
    angles = torch.randn(3, 2, dtype=d, requires_grad=True)
    assert torch.autograd.gradcheck(rotate, (x, angles))
    args = [
        torch.randn(1, 2, 6, dtype=d), torch.randn(1, 3, 6, dtype=d),
        torch.randn(2, 6, 4, dtype=d), torch.randn(2, 6, 4, dtype=d),
        torch.randn(2, 6, 3, dtype=d), torch.randn(2, 3, 6, dtype=d),
    ]  # fmt: skip
    for a in args:
        a.requires_grad_(True)
    variant = nt.AttentionVariant(Rotary())
    assert torch.autograd.gradcheck(
        lambda x, m, *w: multihead(
            x, m, nt.AttentionWeights(*w), variant=variant, offset=1
        )[0],
        args,
    )


def test_tables_follow_the_inputs_device_and_dtype():
    x = torch.randn(B, HEADS, SEQ, KEY, device="meta", dtype=torch.float16)
    out = rotate_heads(x, offset=3)
    assert out.device.type == "meta" and out.dtype == torch.float16
    assert rotary_angles(SEQ, KEY, device="meta").device.type == "meta"


def model_with(kind: str, norm_first: bool, seed: int, layers: int = 2, **config):
    """model_for, with extra config: grouped-query attention, a sliding window."""
    spec = make_spec("copy", kind, "tiny", vocab=VOCAB, positions="rotary")
    spec = replace(spec, config=replace(
        spec.config, norm_first=norm_first, dropout=0.0, encoder_layers=layers,
        decoder_layers=layers, **config,
    ))  # fmt: skip
    torch.manual_seed(seed)
    return build_model(spec).double().eval()


def prompt_and_source(kind: str):
    """A prompt of three tokens; for an encoder-decoder, a source with padding."""
    generator = torch.Generator().manual_seed(0)
    start = torch.randint(4, VOCAB, (2, 3), generator=generator)
    source = torch.randint(4, VOCAB, (2, 7), generator=generator)
    args = (
        (source, nt.key_padding_mask(torch.tensor([7, 4]), 7))
        if kind == "encoder-decoder"
        else ()
    )
    return start, args


@pytest.mark.parametrize("kind", ["encoder-decoder", "decoder-only"])
@pytest.mark.parametrize(
    "norm_first, config",
    [(False, {}), (True, {}), (False, {"kv_heads": 1, "window": 3})],
)
def test_cached_decoding_equals_recomputing_the_prefix(kind, norm_first, config):
    model = model_with(kind, norm_first, 11, **config)
    assert any(
        isinstance(getattr(m, "positions", None), Rotary) for m in model.modules()
    )
    start, args = prompt_and_source(kind)
    cached = greedy(IncrementalDecoder(model, *args), start, 8)
    full = greedy(IncrementalDecoder(model, *args, cache=False), start, 8)
    assert torch.equal(cached.tokens, full.tokens)
    assert (cached.log_probs - full.log_probs).abs().max() <= 1e-10  # float64
    # float32: the bound the project promises
    model = model.float()
    cached = greedy(IncrementalDecoder(model, *args), start, 8)
    full = greedy(IncrementalDecoder(model, *args, cache=False), start, 8)
    assert (cached.log_probs - full.log_probs).abs().max() <= 1e-5


def test_compiled_decoding_equals_the_cache():
    """The compiled step (fullgraph, the position as a tensor) over the fixed cache
    gives the cache's tokens and log-probabilities (float64, 1e-10). One compile, on
    the richest configuration above (decoder-only, one key/value head, a window of 3);
    the tests above prove every configuration's cache against recomputation, and
    tests/test_compiled_decoding.py compiles the encoder-decoder step."""
    compiled_equals_cached(
        model_with("decoder-only", False, 11, kv_heads=1, window=3), "decoder-only"
    )


def compiled_equals_cached(model, kind: str):
    """The compiled decoder's greedy tokens and log-probabilities are the cache's."""
    start, args = prompt_and_source(kind)
    cached = greedy(IncrementalDecoder(model, *args), start, 8)
    torch._dynamo.reset()  # earlier compiles in this process count against the limit
    compiled = greedy(
        CompiledDecoder(model, *args, capacity=11, backend="eager"), start, 8
    )
    assert torch.equal(compiled.tokens, cached.tokens)
    assert (compiled.log_probs - cached.log_probs).abs().max() <= 1e-10


def test_a_model_with_rotary_positions_compiles_with_fullgraph():
    """One layer: dynamo traces every layer's code, so a second layer would trace the
    same code again (a graph break in it would show in the first)."""
    model = model_with("decoder-only", False, 2, layers=1).float()
    model.blocks.layers[0].self_attention.fused = True  # rotate, then SDPA
    tokens = torch.randint(4, VOCAB, (2, 7))
    with nt.shape_checks(False):
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        torch.testing.assert_close(compiled(tokens), model(tokens))
