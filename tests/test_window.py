"""Sliding-window (local) attention: the mask is its definition (j - window < i <= j)
and Hugging Face's; a windowed model reaches back only layers x (window - 1)
positions; the cached decoder keeps the last window - 1 positions only (memory bounded
by the window) and equals recomputation with the windowed mask, with prompts and
generations longer than the window."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import named_transformer as nt
from named_transformer.core.masks import sliding_window_mask
from named_transformer.decoding import IncrementalDecoder, beam_search, greedy
from named_transformer.decoding.compiled import CompiledDecoder
from named_transformer.models.config import TransformerConfig
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.transformer import Transformer
from named_transformer.workflows.runner import build_model, make_spec

VOCAB, LAYER, HEADS = 13, 12, 6


@settings(deadline=None, max_examples=40)
@given(
    seq_q=st.integers(1, 9),
    extra=st.integers(0, 5),
    window=st.integers(1, 10),
    offset=st.integers(0, 6),
)
def test_the_mask_is_its_definition(seq_q, extra, window, offset):
    seq = offset + seq_q + extra
    mask = sliding_window_mask(seq_q, seq, window=window, offset=offset)
    assert mask.shape == (seq_q, seq) and mask.dtype == torch.bool
    for row in range(seq_q):
        j = offset + row  # the query's absolute position
        for i in range(seq):
            assert bool(mask[row, i]) == (j - window < i <= j)
    # each query sees at most `window` keys, itself included
    assert (mask.sum(-1) <= window).all() and mask[:, offset : offset + seq_q].diagonal(
    ).all()  # fmt: skip


def test_a_window_as_long_as_the_sequence_is_the_causal_mask():
    for seq in (1, 5, 8):
        assert torch.equal(sliding_window_mask(seq, window=seq), nt.causal_mask(seq))
        assert torch.equal(sliding_window_mask(seq, window=99), nt.causal_mask(seq))
    assert torch.equal(sliding_window_mask(4, window=1), torch.eye(4, dtype=torch.bool))


def test_the_convention_is_hugging_faces_sliding_window():
    masking = pytest.importorskip("transformers.masking_utils")
    for window in (1, 3, 5):
        rule = masking.sliding_window_causal_mask_function(window)
        q, k = torch.arange(7)[:, None], torch.arange(9)[None, :]
        expected = rule(0, 0, q + 2, k)  # queries at absolute positions 2..8
        torch.testing.assert_close(
            sliding_window_mask(7, 9, window=window, offset=2), expected
        )


def test_bad_windows_are_refused():
    with pytest.raises(ValueError, match="window must be at least 1"):
        sliding_window_mask(4, window=0)
    with pytest.raises(ValueError, match="window must be at least 1"):
        TransformerConfig(window=0)
    assert sliding_window_mask(3, window=2, device="meta").device.type == "meta"


def config(window, kv_heads=None, layers=2, **options):
    return TransformerConfig(
        encoder_layers=layers, decoder_layers=layers, layer=LAYER, heads=HEADS,
        hidden=20, dropout=0.0, window=window, kv_heads=kv_heads, **options,
    )  # fmt: skip


def language_model(window, kv_heads=None, seed=0, **options):
    torch.manual_seed(seed)
    return LanguageModel(VOCAB, config(window, kv_heads, **options)).double().eval()


def transformer(window, kv_heads=None, seed=0):
    torch.manual_seed(seed)
    return Transformer(11, VOCAB, config(window, kv_heads)).double().eval()


def test_the_model_uses_the_windowed_mask():
    model = language_model(3)
    tokens = torch.randint(0, VOCAB, (2, 9))
    embedded = model.positions(model.embedding(tokens))
    expected = model.generator(model.blocks(embedded, sliding_window_mask(9, window=3)))
    torch.testing.assert_close(model(tokens), expected)
    encdec = transformer(3)
    source = torch.randint(0, 11, (2, 5))
    memory = encdec.encode(source)
    torch.testing.assert_close(
        encdec(source, tokens),
        encdec.decode(tokens, memory, target_mask=sliding_window_mask(9, window=3)),
    )
    # a window as long as the sequence changes nothing
    torch.testing.assert_close(language_model(9)(tokens), language_model(None)(tokens))


def test_two_layers_reach_back_two_times_window_minus_one_positions():
    model = language_model(3)  # 2 layers: position j sees j - 4 ... j
    tokens = torch.randint(0, VOCAB, (1, 10))
    base = model(tokens)
    for changed in range(10):
        other = tokens.clone()
        other[0, changed] = (other[0, changed] + 1) % VOCAB
        moved = (model(other) - base).abs().amax(-1)[0] > 1e-12
        for j in range(10):
            assert bool(moved[j]) == (j - 4 <= changed <= j), (changed, j)


WINDOW = 4


@pytest.mark.parametrize("kv_heads", [None, 2, 1])
@pytest.mark.parametrize("kind", ["decoder-only", "encoder-decoder"])
@pytest.mark.parametrize("prompt", [1, 6])  # 6: a prompt longer than the window
def test_cached_windowed_decoding_equals_recomputing(kind, kv_heads, prompt):
    build = language_model if kind == "decoder-only" else transformer
    model = build(WINDOW, kv_heads)
    start = torch.randint(4, VOCAB, (2, prompt))
    args = () if kind == "decoder-only" else (torch.randint(4, 11, (2, 6)),)
    decoder = IncrementalDecoder(model, *args)
    cached = greedy(decoder, start, 25)  # far past the window, and past 16 slots
    full = greedy(IncrementalDecoder(model, *args, cache=False), start, 25)
    assert torch.equal(cached.tokens, full.tokens)
    torch.testing.assert_close(cached.log_probs, full.log_probs, rtol=0, atol=1e-10)
    entry = decoder.caches[0]
    assert entry.start > 0  # positions that left the window were dropped
    assert entry.first == decoder.length - 1 - (WINDOW - 1)  # the last step's window


def test_cached_windowed_decoding_in_float32_is_within_1e_5_with_beams():
    model = language_model(WINDOW, 2, seed=4).float()
    start = torch.randint(4, VOCAB, (3, 7))
    cached = greedy(IncrementalDecoder(model), start, 30)
    full = greedy(IncrementalDecoder(model, cache=False), start, 30)
    assert torch.equal(cached.tokens, full.tokens)
    assert (cached.log_probs - full.log_probs).abs().max() <= 1e-5
    beams = [beam_search(IncrementalDecoder(model, cache=c), start, 12, eos=2,
                         width=3) for c in (True, False)]  # fmt: skip
    assert torch.equal(beams[0].tokens, beams[1].tokens)
    torch.testing.assert_close(beams[0].scores, beams[1].scores, rtol=0, atol=1e-5)


def test_a_prompt_fed_in_pieces_gives_the_same_cache():
    model = language_model(WINDOW, 3)
    tokens = torch.randint(4, VOCAB, (2, 13))
    whole, pieces = IncrementalDecoder(model), IncrementalDecoder(model)
    expected = whole(tokens)
    for end in (2, 3, 9, 10, 13):  # 1, 6 and 3 new tokens at a time
        got = pieces(tokens[:, :end])
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("positions", ["relative", "rotary", "alibi"])
@pytest.mark.parametrize("kind", ["decoder-only", "encoder-decoder"])
def test_positions_inside_attention_under_a_window_decode_as_recomputed(
    positions, kind
):
    """The cached step hands these modules the queries' offset counted from the first
    key the window kept: relative distances stay right after keys are dropped."""
    spec = make_spec("copy", kind, "tiny", vocab=VOCAB, positions=positions,
                     max_distance=3)  # fmt: skip
    spec = replace(spec, config=replace(spec.config, dropout=0.0, window=3))
    torch.manual_seed(2)
    model = build_model(spec).double().eval()
    start = torch.randint(4, VOCAB, (2, 5))
    args = () if kind == "decoder-only" else (torch.randint(4, VOCAB, (2, 6)),)
    cached = greedy(IncrementalDecoder(model, *args), start, 20)
    full = greedy(IncrementalDecoder(model, *args, cache=False), start, 20)
    assert torch.equal(cached.tokens, full.tokens)
    torch.testing.assert_close(cached.log_probs, full.log_probs, rtol=0, atol=1e-10)


def test_the_windowed_cache_memory_is_bounded_by_the_window():
    start = torch.randint(4, VOCAB, (1, 20))  # a prompt five windows long
    windowed = IncrementalDecoder(language_model(WINDOW))
    full = IncrementalDecoder(language_model(None))
    per_position = 2 * 2 * 1 * HEADS * (LAYER // HEADS) * 8  # layers, k/v, batch, ...
    held, allocated = [], []
    tokens = start
    for _ in range(60):
        for decoder in (windowed, full):
            decoder(tokens)
        tokens = torch.cat([tokens, torch.randint(4, VOCAB, (1, 1))], -1)
        held.append(windowed.cache_bytes())
        allocated.append(windowed.cache_bytes(allocated=True))
    assert set(held) == {(WINDOW - 1) * per_position}  # the last window - 1 positions
    # after the prompt's step, whatever the length, at most a few windows' worth
    assert max(allocated[1:]) <= 4 * WINDOW * per_position
    assert full.cache_bytes() == full.length * per_position == 79 * per_position


def test_compiled_decoding_applies_the_window():
    """One layer (the window is the mask of each layer's step; the cached tests above
    prove two), 11 steps after a prompt of 3: 14 positions, over three windows."""
    model = language_model(WINDOW, 2, seed=3, layers=1)
    start = torch.randint(4, VOCAB, (2, 3))
    ours = greedy(CompiledDecoder(model, capacity=14, backend="eager"), start, 11)
    reference = greedy(IncrementalDecoder(model, cache=False), start, 11)
    assert torch.equal(ours.tokens, reference.tokens)
    torch.testing.assert_close(ours.log_probs, reference.log_probs, rtol=0, atol=1e-10)
