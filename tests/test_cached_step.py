"""The eager cached step's plan: each layer's norms, residual sublayers and
feed-forward called as equations with their weights, not through the modules.

Each test compares against an independent computation: the model's own full forward
over the whole prefix (recomputation), or the same decoder run through the modules
(while a recording is open, or while the model is in training mode with no dropout).
"""

import pytest
import torch

import named_transformer as nt
from named_transformer.decoding import IncrementalDecoder, greedy
from named_transformer.decoding.incremental import _FeedForward, _Norm, _Residual
from named_transformer.models.config import TransformerConfig
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.transformer import Transformer

TOKENS = 6


def _llama(**sizes) -> LanguageModel:
    torch.manual_seed(0)
    config = TransformerConfig.llama(
        decoder_layers=2, layer=16, heads=4, kv_heads=2, hidden=24, **sizes
    )
    return LanguageModel(29, config, positions="rotary", scale_embeddings=False).eval()


def _plain(**options) -> LanguageModel:
    torch.manual_seed(1)
    config = TransformerConfig(
        decoder_layers=2, layer=16, heads=4, hidden=24, dropout=0.0, **options
    )
    return LanguageModel(29, config).eval()


MODELS = {
    "post-norm, LayerNorm, ReLU": lambda: _plain(),
    "pre-norm, final norm, GELU": lambda: _plain(norm_first=True, activation="gelu"),
    "Llama: RMSNorm, SwiGLU, rotary, grouped": lambda: _llama(),
    "Llama with a window": lambda: _llama(window=3),
}


@pytest.mark.parametrize("name", MODELS)
def test_the_plan_calls_the_equations_and_equals_recomputation(name):
    model = MODELS[name]()
    decoder = IncrementalDecoder(model)
    for plan in decoder.plans:  # the known kinds are all planned as equations
        assert all(isinstance(r, _Residual) for r in plan.residuals.values())
        assert isinstance(plan.feed_forward, _FeedForward)
        assert all(isinstance(r.norm, _Norm) for r in plan.residuals.values())
    prompt = torch.tensor([[3, 1, 4]])
    cached = greedy(decoder, prompt, TOKENS)
    with torch.no_grad():  # every step's log-probabilities from one full forward
        full = torch.cat([prompt, cached.tokens], dim=-1)
        recomputed = model(full[:, :-1])[:, prompt.shape[-1] - 1 :]
    torch.testing.assert_close(cached.log_probs, recomputed, atol=1e-5, rtol=0)


def test_an_encoder_decoder_plans_its_three_sublayers():
    torch.manual_seed(2)
    config = TransformerConfig(
        encoder_layers=1, decoder_layers=2, layer=16, heads=4, hidden=24,
        dropout=0.0, norm_first=True,
    )  # fmt: skip
    model = Transformer(23, 23, config).eval()
    source = torch.tensor([[5, 6, 7, 8]])
    decoder = IncrementalDecoder(model, source)
    assert set(decoder.plans[0].residuals) == {
        "self_attention_residual", "cross_attention_residual",
        "feed_forward_residual",
    }  # fmt: skip
    cached = greedy(decoder, torch.tensor([[1]]), TOKENS)
    again = greedy(IncrementalDecoder(model, source, cache=False), torch.tensor([[1]]),
                   TOKENS)  # fmt: skip
    assert cached.tokens.tolist() == again.tokens.tolist()
    torch.testing.assert_close(cached.log_probs, again.log_probs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", MODELS)
def test_with_a_recording_open_the_modules_run_and_give_the_same_numbers(name):
    model = MODELS[name]()
    prompt = torch.tensor([[2, 7]])
    planned = greedy(IncrementalDecoder(model), prompt, TOKENS)
    with nt.record(model) as found:
        through_modules = greedy(IncrementalDecoder(model), prompt, TOKENS)
    # the modules' taps fired: the residual stream of every layer was recorded
    assert any(name.endswith("feed_forward_residual.outputs") for name in found)
    assert planned.tokens.tolist() == through_modules.tokens.tolist()
    torch.testing.assert_close(
        planned.log_probs, through_modules.log_probs, atol=1e-6, rtol=0
    )


def test_a_training_model_decodes_through_its_modules():
    model = _plain().train()  # dropout 0.0: the same function, through the modules
    prompt = torch.tensor([[2, 7]])
    with torch.no_grad():
        trained = greedy(IncrementalDecoder(model), prompt, TOKENS)
        evaluated = greedy(IncrementalDecoder(model.eval()), prompt, TOKENS)
    torch.testing.assert_close(trained.log_probs, evaluated.log_probs, atol=1e-6,
                               rtol=0)  # fmt: skip


def test_a_learners_layer_norm_and_feed_forward_reach_the_cached_step():
    from named_transformer.core.feedforward import feed_forward
    from named_transformer.core.norm import layer_norm

    calls = {"layer_norm": 0, "feed_forward": 0}

    def counted(name, function):
        def call(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return call

    model = _plain()
    prompt = torch.tensor([[2, 7]])
    expected = greedy(IncrementalDecoder(model), prompt, TOKENS)
    switch = {
        "layer_norm": counted("layer_norm", layer_norm),
        "feed_forward": counted("feed_forward", feed_forward),
    }
    with nt.exercises.use(switch, names=list(switch)):
        decoded = greedy(IncrementalDecoder(model), prompt, TOKENS)
    # 2 layers x (2 norms, 1 feed-forward) per step, 1 + TOKENS - 1 steps
    assert calls == {"layer_norm": 4 * TOKENS, "feed_forward": 2 * TOKENS}
    torch.testing.assert_close(decoded.log_probs, expected.log_probs, atol=0, rtol=0)


@pytest.mark.parametrize("name", MODELS)
def test_a_prompt_prefilled_in_one_pass_equals_recomputation_in_float64(name):
    """Prefill then decode: every step's log-probabilities equal the full forward's
    over the prefix (float64: to rounding); the prompt takes one pass of each layer,
    and the generator reads only its last position."""
    model = MODELS[name]().double()
    rows = []
    generator = model.generator.forward

    def counted(inputs):
        rows.append(inputs.shape[-2])
        return generator(inputs)

    model.generator.forward = counted
    prompt = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5]])
    cached = greedy(IncrementalDecoder(model), prompt, TOKENS)
    assert rows == [1] * TOKENS  # the prompt's pass, then one per new token
    del model.generator.forward
    with torch.no_grad():
        full = torch.cat([prompt, cached.tokens], dim=-1)
        recomputed = model(full[:, :-1])[:, prompt.shape[-1] - 1 :]
    torch.testing.assert_close(cached.log_probs, recomputed, atol=1e-12, rtol=0)


def test_an_attention_only_block_plans_its_attention_alone():
    """No feed-forward and no norm: the plan has the attention's residual sublayer
    only, called as $X + f(X)$, and equals recomputation."""
    torch.manual_seed(3)
    config = TransformerConfig.attention_only(decoder_layers=2, layer=16, heads=4)
    model = LanguageModel(29, config).eval()
    decoder = IncrementalDecoder(model)
    for plan in decoder.plans:
        assert set(plan.residuals) == {"attention_residual"}
        assert plan.feed_forward is None
        assert all(r.norm is None for r in plan.residuals.values())
    prompt = torch.tensor([[3, 1, 4]])
    cached = greedy(decoder, prompt, TOKENS)
    with torch.no_grad():
        full = torch.cat([prompt, cached.tokens], dim=-1)
        recomputed = model(full[:, :-1])[:, prompt.shape[-1] - 1 :]
    torch.testing.assert_close(cached.log_probs, recomputed, atol=1e-5, rtol=0)
