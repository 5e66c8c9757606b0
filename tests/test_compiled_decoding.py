"""The compiled decoder over a fixed-size cache gives the cache's log-probabilities, in
one graph for every position, and refuses what it cannot do."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from named_transformer import key_padding_mask
from named_transformer.decoding import IncrementalDecoder, beam_search, greedy
from named_transformer.decoding.compiled import CompiledDecoder
from tests.test_decoding import VOCAB, model_for


def _decoders(kind: str, model, capacity: int, backend):
    source = torch.randint(4, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    args = (
        (source, key_padding_mask(torch.tensor([7, 4]), 7))
        if kind == "encoder-decoder"
        else ()
    )
    return CompiledDecoder(
        model, *args, capacity=capacity, backend=backend
    ), IncrementalDecoder(model, *args)


@pytest.mark.parametrize(
    ("kind", "positions", "norm_first"),
    [("encoder-decoder", "sinusoidal", False), ("decoder-only", "learned", True),
     ("decoder-only", "sinusoidal", False), ("encoder-decoder", "learned", True)],
)  # fmt: skip
def test_compiled_decoding_equals_the_cache(kind, positions, norm_first):
    model = model_for(kind, positions, norm_first, 3)
    start = torch.randint(4, VOCAB, (2, 3))  # a prompt of three tokens: one pass
    compiled, cached = _decoders(kind, model, 9, "eager")
    ours, reference = greedy(compiled, start, 6), greedy(cached, start, 6)
    assert torch.equal(ours.tokens, reference.tokens)
    torch.testing.assert_close(ours.log_probs, reference.log_probs, rtol=0, atol=1e-10)


def test_one_graph_serves_every_position_and_every_decoder():
    graphs = []

    def counting(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    model = model_for("decoder-only", "sinusoidal", False, 4)
    # prompts of three lengths (each in one eager pass): one graph for the steps
    for length in (2, 5, 3):
        start = torch.randint(4, VOCAB, (2, length))
        greedy(CompiledDecoder(model, capacity=12, backend=counting), start, 6)
    assert len(graphs) == 1


def test_a_prompt_goes_in_one_eager_pass_then_one_compiled_step_a_token():
    steps = []

    def counting(graph, example_inputs):
        def run(*args):
            steps.append(args)
            return graph.forward(*args)

        return run

    torch._dynamo.reset()
    model = model_for("decoder-only", "sinusoidal", False, 4)
    start = torch.randint(4, VOCAB, (2, 5))
    ours = greedy(CompiledDecoder(model, capacity=9, backend=counting), start, 4)
    reference = greedy(IncrementalDecoder(model), start, 4)
    # greedy's log-probabilities come from the prompt's pass and three compiled steps
    assert len(steps) == 3
    assert torch.equal(ours.tokens, reference.tokens)
    torch.testing.assert_close(ours.log_probs, reference.log_probs, rtol=0, atol=1e-10)


def test_a_later_prompt_and_a_sliding_window_prompt_equal_the_cache():
    torch._dynamo.reset()
    model = model_for("decoder-only", "sinusoidal", False, 8)
    start = torch.randint(4, VOCAB, (2, 4))
    compiled = CompiledDecoder(model, capacity=12, backend="eager")
    cached = IncrementalDecoder(model)
    later = torch.cat([start, torch.randint(4, VOCAB, (2, 3))], -1)
    for tokens in (start, later):  # the second: three tokens after a cached prompt
        torch.testing.assert_close(compiled(tokens), cached(tokens), rtol=0, atol=1e-10)
    model.config = replace(model.config, window=3)
    windowed = greedy(CompiledDecoder(model, capacity=12, backend="eager"), later, 3)
    reference = greedy(IncrementalDecoder(model), later, 3)
    assert torch.equal(windowed.tokens, reference.tokens)
    torch.testing.assert_close(
        windowed.log_probs, reference.log_probs, rtol=0, atol=1e-10
    )


def test_beam_search_reorders_the_fixed_cache():
    model = model_for("encoder-decoder", "sinusoidal", False, 5)
    start = torch.ones(2, 1, dtype=torch.long)
    compiled, cached = _decoders("encoder-decoder", model, 8, "eager")
    ours = beam_search(compiled, start, 7, eos=2, width=3)
    reference = beam_search(cached, start, 7, eos=2, width=3)
    assert torch.equal(ours.tokens, reference.tokens)
    torch.testing.assert_close(ours.scores, reference.scores, rtol=0, atol=1e-10)


def test_inductor_compiled_decoding_in_float32_is_within_1e_5():
    model = model_for("decoder-only", "sinusoidal", False, 6).float()
    start = torch.randint(4, VOCAB, (2, 1))
    ours = greedy(CompiledDecoder(model, capacity=12), start, 11)
    reference = greedy(IncrementalDecoder(model), start, 11)
    assert torch.equal(ours.tokens, reference.tokens)
    assert (ours.log_probs - reference.log_probs).abs().max() <= 1e-5


def test_what_it_cannot_do_is_refused_with_the_reason():
    model = model_for("decoder-only", "sinusoidal", False, 7)
    decoder = CompiledDecoder(model, capacity=3, backend="eager")
    with pytest.raises(ValueError, match="capacity of 3"):
        greedy(decoder, torch.ones(1, 2, dtype=torch.long), 3)  # a fourth position
    with pytest.raises(ValueError, match="capacity must be"):
        CompiledDecoder(model, capacity=0)
    with pytest.raises(ValueError, match="relative"):
        CompiledDecoder(model_for("decoder-only", "relative", False, 7), capacity=4)
    with pytest.raises(ValueError, match="eval"):
        CompiledDecoder(model.train(), capacity=4)
