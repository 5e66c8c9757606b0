"""Decoding: the key/value cache gives the same tokens and log-probabilities as
recomputing the prefix (encoder–decoder, decoder-only, relative positions, pre- and
post-norm), and greedy, beam search and sampling behave as their definitions say."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import TypeCheckError

from named_transformer import key_padding_mask, shape_checks
from named_transformer.decoding import (
    IncrementalDecoder,
    beam_search,
    greedy,
    length_penalty,
    sample,
    strip_after_eos,
)
from named_transformer.workflows.runner import build_model, make_spec

VOCAB = 13


def model_for(kind: str, positions: str, norm_first: bool, seed: int):
    spec = make_spec(
        "copy", kind, "tiny", vocab=VOCAB, positions=positions, max_distance=3
    )
    spec = replace(spec, config=replace(
        spec.config, norm_first=norm_first, dropout=0.0, encoder_layers=2,
        decoder_layers=2,
    ))  # fmt: skip
    torch.manual_seed(seed)
    return build_model(spec).double().eval()


@settings(deadline=None, max_examples=10)
@given(
    kind=st.sampled_from(["encoder-decoder", "decoder-only"]),
    positions=st.sampled_from(["sinusoidal", "learned", "relative", "rotary", "alibi"]),
    norm_first=st.booleans(),
    seed=st.integers(0, 2**16),
    batch=st.integers(1, 3),
    prefix=st.integers(1, 4),
    steps=st.integers(1, 4),
)
def test_cached_decoding_equals_recomputing_the_prefix(
    kind, positions, norm_first, seed, batch, prefix, steps
):
    model = model_for(kind, positions, norm_first, seed)
    generator = torch.Generator().manual_seed(seed)
    start = torch.randint(4, VOCAB, (batch, prefix), generator=generator)
    source = torch.randint(4, VOCAB, (batch, 7), generator=generator)
    lengths = torch.randint(1, 8, (batch,), generator=generator)
    mask = key_padding_mask(lengths, 7)
    args = (source, mask) if kind == "encoder-decoder" else ()
    with torch.no_grad():
        cached = greedy(IncrementalDecoder(model, *args, cache=True), start, steps)
        full = greedy(IncrementalDecoder(model, *args, cache=False), start, steps)
    assert torch.equal(cached.tokens, full.tokens)
    torch.testing.assert_close(cached.log_probs, full.log_probs, rtol=0, atol=1e-5)
    # and the recomputed step is the model's own teacher-forced output
    tokens = torch.cat([start, full.tokens], -1)
    if kind == "encoder-decoder":
        teacher = model(source, tokens, mask)
    else:
        teacher = model(tokens)
    torch.testing.assert_close(
        full.log_probs, teacher[:, prefix - 1 : -1], rtol=0, atol=1e-8
    )


def test_cache_in_float32_is_within_1e_5():
    model = model_for("encoder-decoder", "relative", False, 0).float()
    source = torch.randint(4, VOCAB, (2, 9))
    start = torch.ones(2, 1, dtype=torch.long)
    with torch.no_grad():
        a = greedy(IncrementalDecoder(model, source), start, 8)
        b = greedy(IncrementalDecoder(model, source, cache=False), start, 8)
    assert torch.equal(a.tokens, b.tokens)
    assert (a.log_probs - b.log_probs).abs().max() <= 1e-5


@pytest.mark.parametrize(
    "val", [None, 11]
)  # 11: values wider than keys, no stacked W_qkv
def test_long_cached_decoding_grows_its_buffers_and_equals_recomputing(val):
    from named_transformer.models.multihead import MultiHeadAttention

    model = model_for("decoder-only", "sinusoidal", False, 1)
    if val is not None:
        for block in model.blocks.layers:
            layer, heads = block.self_attention.layer, block.self_attention.heads
            block.self_attention = MultiHeadAttention(layer, heads, val=val).double()
    start = torch.randint(4, VOCAB, (2, 3))
    with torch.no_grad():  # 3 + 40 positions: the cache's buffers grow past 16 and 32
        cached = greedy(IncrementalDecoder(model), start, 40)
        full = greedy(IncrementalDecoder(model, cache=False), start, 40)
        beams = [
            beam_search(IncrementalDecoder(model, cache=c), start, 40, eos=2, width=3)
            for c in (True, False)
        ]
    assert torch.equal(cached.tokens, full.tokens)
    torch.testing.assert_close(cached.log_probs, full.log_probs, rtol=0, atol=1e-8)
    assert torch.equal(beams[0].tokens, beams[1].tokens)


def test_decoding_needs_no_no_grad_and_leaves_no_graph():
    model = (
        model_for("encoder-decoder", "sinusoidal", False, 2).float().train()
    )  # parameters want gradients
    source = torch.randint(4, VOCAB, (2, 5))
    decoder = IncrementalDecoder(model.eval(), source)
    log_probs = decoder(torch.ones(2, 1, dtype=torch.long))  # grad mode is on here
    assert not log_probs.requires_grad and torch.is_inference(log_probs)
    assert all(p.grad is None for p in model.parameters())


def test_greedy_stops_at_eos_and_pads_after_it():
    model = model_for("decoder-only", "sinusoidal", False, 1)
    start = torch.randint(4, VOCAB, (3, 2))
    with torch.no_grad():
        free = greedy(IncrementalDecoder(model), start, 6)
        eos = int(free.tokens[0, 0])  # pretend row 0's first choice is eos
        stopped = greedy(IncrementalDecoder(model), start, 6, eos=eos, pad=0)
    row = stopped.tokens[0].tolist()
    assert row[0] == eos and set(row[1:]) <= {0}
    assert strip_after_eos(stopped.tokens, eos)[0] == []
    for got, expected in zip(
        stopped.tokens.tolist(), free.tokens.tolist(), strict=True
    ):
        cut = expected.index(eos) + 1 if eos in expected else len(expected)
        assert got[:cut] == expected[:cut]  # identical up to each row's eos


def test_beam_of_width_one_is_greedy_and_wider_beams_score_no_worse():
    model = model_for("encoder-decoder", "sinusoidal", False, 2)
    source = torch.randint(4, VOCAB, (3, 6))
    start = torch.ones(3, 1, dtype=torch.long)
    with torch.no_grad():
        plain = greedy(IncrementalDecoder(model, source), start, 4)
        one = beam_search(
            IncrementalDecoder(model, source), start, 4, eos=2, width=1, alpha=0.0
        )
        wide = beam_search(
            IncrementalDecoder(model, source), start, 4, eos=2, width=3, alpha=0.0
        )

        def score(tokens):
            lp = model(source, torch.cat([start, tokens[:, :-1]], -1))
            return lp.gather(-1, tokens[..., None])[..., 0].sum(-1)

    assert torch.equal(one.tokens, plain.tokens)
    assert wide.extra["beams"].shape == (3, 3, wide.tokens.shape[-1])
    # no eos in this untrained model's top choices within 4 steps: the scores are
    # comparable
    if not (plain.tokens == 2).any() and not (wide.tokens == 2).any():
        assert (score(wide.tokens) >= score(plain.tokens) - 1e-9).all()
        torch.testing.assert_close(wide.scores, score(wide.tokens))


def test_sampling_top_1_is_greedy_and_a_seed_repeats_draws():
    model = model_for("decoder-only", "relative", True, 3)
    start = torch.randint(4, VOCAB, (4, 3))
    with torch.no_grad():
        plain = greedy(IncrementalDecoder(model), start, 4)
        top1 = sample(IncrementalDecoder(model), start, 4, top_k=1)
        cold = sample(IncrementalDecoder(model), start, 4, temperature=1e-4)

        def draw(seed):
            g = torch.Generator().manual_seed(seed)
            return sample(
                IncrementalDecoder(model), start, 4, temperature=2.0, generator=g
            ).tokens

        assert torch.equal(draw(5), draw(5))
    assert torch.equal(top1.tokens, plain.tokens) and torch.equal(
        cold.tokens, plain.tokens
    )


def test_top_k_only_draws_among_the_k_most_likely():
    model = model_for("decoder-only", "sinusoidal", False, 4)
    start = torch.randint(4, VOCAB, (64, 2))
    with torch.no_grad():
        first = IncrementalDecoder(model)(start)
        drawn = sample(IncrementalDecoder(model), start, 1, top_k=3, temperature=5.0,
                       generator=torch.Generator().manual_seed(0))  # fmt: skip
    allowed = first.topk(3).indices
    assert (drawn.tokens[:, :1] == allowed).any(-1).all()


def test_bad_arguments_are_rejected():
    model = model_for("encoder-decoder", "sinusoidal", False, 5)
    start = torch.ones(2, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="source"):
        IncrementalDecoder(model)
    decoder = IncrementalDecoder(model, torch.randint(4, VOCAB, (2, 3)))
    with pytest.raises(ValueError, match="temperature"):
        sample(decoder, start, 3, temperature=0.0)
    with pytest.raises(ValueError, match="top_k"):
        sample(decoder, start, 3, top_k=0)
    with pytest.raises(ValueError, match="width"):
        beam_search(decoder, start, 3, eos=2, width=0)


def test_wrong_axis_size_names_the_argument():
    model = model_for("decoder-only", "sinusoidal", False, 6)
    with shape_checks(True), pytest.raises(TypeCheckError, match="start"):
        greedy(IncrementalDecoder(model), torch.ones(3, dtype=torch.long), 2)
    with shape_checks(True), pytest.raises(TypeCheckError, match="tokens"):
        strip_after_eos(torch.ones(3, dtype=torch.long), 2)


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.0) == 1.0
    assert length_penalty(7, 1.0) == pytest.approx(2.0)
    torch.testing.assert_close(
        length_penalty(torch.tensor([1.0, 7.0]), 0.5), torch.tensor([1.0, 2.0**0.5])
    )


def test_search_functions_and_no_positions_reject_wrong_sizes():
    from named_transformer.workflows.runner import NoPositions

    model = model_for("decoder-only", "sinusoidal", False, 7)
    with shape_checks(True):
        with pytest.raises(TypeCheckError, match="start"):
            sample(IncrementalDecoder(model), torch.ones(2, dtype=torch.long), 2)
        with pytest.raises(TypeCheckError, match="start"):
            beam_search(
                IncrementalDecoder(model), torch.ones(2, dtype=torch.long), 2, eos=2
            )
        with pytest.raises(TypeCheckError, match="inputs"):
            NoPositions()(torch.ones(3))
    inputs = torch.randn(2, 3, 4)
    assert torch.equal(NoPositions(0.5).eval()(inputs, offset=7), inputs)


PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4


class TableDecoder(IncrementalDecoder):
    """A fake model: next-token probabilities looked up by the whole prefix, set by
    hand (tokens not listed: log-probability -30; an unlisted prefix: a or b, even)."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]]) -> None:
        self.table = table  # no model, no cache: every call reads the prefix

    def select(self, rows: torch.Tensor) -> None:
        pass

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        log_probs = torch.full((tokens.shape[0], 7), -30.0, dtype=torch.float64)
        for row, prefix in enumerate(tokens.tolist()):
            for token, p in self.table.get(tuple(prefix), {A: 0.5, B: 0.5}).items():
                log_probs[row, token] = math.log(p)
        return log_probs


def test_beam_search_returns_a_finished_hypothesis_over_a_likelier_unfinished_one():
    """Row 1: [eos] (p 0.4) stays in the beam beside [a a a] (p 0.486, unfinished at
    max_len): [eos] wins. Row 2: [eos] (p 0.1) falls out of the beam at step 2 and
    nothing else finishes: it still wins. Row 3: nothing finishes: the best beam."""
    first, second, third = 1, 5, 6  # a start token per row, selecting its table
    table = {
        (first,): {A: 0.6, EOS: 0.4}, (first, A): {A: 0.9, B: 0.1},
        (first, A, A): {A: 0.9, B: 0.1},
        (second,): {A: 0.9, EOS: 0.1}, (second, A, A): {A: 0.95, EOS: 0.05},
        (second, A, B): {B: 0.95, EOS: 0.05},
        (third,): {A: 0.7, B: 0.3}, (third, A): {A: 0.6, B: 0.4},
        (third, A, A): {A: 0.6, B: 0.4},
    }  # fmt: skip
    start = torch.tensor([[first], [second], [third]])
    found = beam_search(TableDecoder(table), start, 3, eos=EOS, width=2, alpha=0.6)
    assert found.tokens.tolist() == [[EOS, PAD, PAD], [EOS, PAD, PAD], [A, A, A]]
    expected = [
        math.log(0.4) / length_penalty(1, 0.6),
        math.log(0.1) / length_penalty(1, 0.6),
        math.log(0.7 * 0.6 * 0.6) / length_penalty(3, 0.6),
    ]
    torch.testing.assert_close(
        found.scores, torch.tensor(expected, dtype=torch.float64)
    )
    # the unfinished beams did score higher, normalised too: it is the rule that decides
    beams = found.extra["beams"].tolist()
    assert beams[0] == [[A, A, A], [EOS, PAD, PAD]] and EOS not in sum(beams[1], [])
    assert math.log(0.6 * 0.9 * 0.9) / length_penalty(3, 0.6) > expected[0]


def test_a_prompt_from_position_0_runs_the_fused_kernel_and_equals_recomputing(
    monkeypatch,
):
    from named_transformer.decoding import incremental

    calls = []
    kernel = incremental.F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs["is_causal"])
        return kernel(*args, **kwargs)

    monkeypatch.setattr(incremental.F, "scaled_dot_product_attention", spy)
    model = model_for("decoder-only", "sinusoidal", True, 9)
    start = torch.randint(4, VOCAB, (3, 6))
    with torch.no_grad():
        cached = greedy(IncrementalDecoder(model), start, 4)
        full = greedy(IncrementalDecoder(model, cache=False), start, 4)
    # the prompt's pass in the first of the two layers; the last layer takes the
    # prompt's keys and values apart and attends from its last position alone, as
    # the one-token steps do, materialising
    assert calls == [True]
    assert torch.equal(cached.tokens, full.tokens)
    torch.testing.assert_close(cached.log_probs, full.log_probs, rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_the_step_rotation_is_rotate_heads(dtype):
    from named_transformer.decoding.incremental import _StepRotary
    from named_transformer.models.rotary import Rotary, rotate_heads

    scheme = Rotary(base=500.0)
    stacked = torch.randn(2, 7, 5, 8, dtype=torch.float64).to(dtype)
    queries = stacked[:, :4]  # strided, as the stacked projection's views are
    with torch.inference_mode():
        for offset in (0, 6):
            ours = _StepRotary(scheme).rotate(queries, offset)
            assert torch.equal(ours, rotate_heads(queries, offset=offset, base=500.0))
            assert ours.dtype == dtype and ours.is_contiguous()
        # a tensor offset (the compiled step) is rotated by the scheme itself
        offset = torch.tensor([6])
        assert torch.equal(
            _StepRotary(scheme).rotate(queries, offset),
            rotate_heads(queries, offset=offset, base=500.0),
        )


def assert_prompt_equals_recomputing(model, tokens: torch.Tensor) -> None:
    """A fresh cached decoder's log-probabilities after the prompt ``tokens`` are
    those of recomputing it (float64, 1e-10)."""
    with torch.no_grad():
        torch.testing.assert_close(
            IncrementalDecoder(model)(tokens),
            IncrementalDecoder(model, cache=False)(tokens), rtol=0, atol=1e-10,
        )  # fmt: skip


def test_a_new_decoder_restacks_w_qkv_into_the_memory_of_the_last():
    from named_transformer.decoding import incremental
    from named_transformer.models.multihead import stacked_weights

    model = model_for("decoder-only", "rotary", True, 11)
    attention = model.blocks.layers[0].self_attention
    first = IncrementalDecoder(model).caches[0].w_qkv
    with torch.no_grad():
        attention.w_k.data.mul_(2)  # behind autograd's back: no version counter moves
    second = IncrementalDecoder(model).caches[0].w_qkv
    assert second.data_ptr() == first.data_ptr()
    assert torch.equal(second, stacked_weights(attention.named_weights())[0])
    assert_prompt_equals_recomputing(model, torch.randint(4, VOCAB, (2, 5)))
    model.float()  # another dtype: new memory, the right numbers
    third = IncrementalDecoder(model).caches[0].w_qkv
    assert third.dtype == torch.float32 and third.data_ptr() != first.data_ptr()
    assert torch.equal(third, stacked_weights(attention.named_weights())[0])
    assert incremental._W_QKV[attention] is third


@pytest.mark.parametrize(
    ("kind", "norm_first", "window"),
    [("decoder-only", True, None), ("decoder-only", False, 3),
     ("encoder-decoder", False, None), ("encoder-decoder", True, None)],
)  # fmt: skip
def test_a_later_prompt_then_steps_equal_recomputing(kind, norm_first, window):
    # a prompt, then several tokens at once after it (the last layer writes their
    # keys and values apart from the last position, at an offset), then one at a time
    model = model_for(kind, "rotary", norm_first, 12)
    model.config = replace(model.config, window=window)
    source = torch.randint(4, VOCAB, (2, 5))
    tokens = torch.randint(4, VOCAB, (2, 11))
    extra = (source, None) if kind == "encoder-decoder" else ()
    cached = IncrementalDecoder(model, *extra)
    full = IncrementalDecoder(model, *extra, cache=False)
    with torch.no_grad():
        for length in (4, 8, 9, 10, 11):
            torch.testing.assert_close(
                cached(tokens[:, :length]), full(tokens[:, :length]),
                rtol=0, atol=1e-10,
            )  # fmt: skip


def test_a_layer_shared_twice_takes_the_prompt_apart_only_where_it_is_last():
    model = model_for("decoder-only", "rotary", True, 13)
    shared = model.blocks.layers[0]
    model.blocks.layers = torch.nn.ModuleList([shared, shared])  # tied weights
    assert_prompt_equals_recomputing(model, torch.randint(4, VOCAB, (2, 6)))
