"""Every activation TransformerLens records equals its named counterpart, rearranged
by axis names, in float64: GPT-2's layout and Llama's (TransformerLens 3.x, a test
dependency and the reference only; its HookedTransformer builds offline from a
config)."""

import pytest
import torch

import named_transformer as nt
from named_transformer.recording import record
from tests.test_inside import VOCAB, _tokens, gpt2_layout, llama_layout


@pytest.fixture(autouse=True, scope="module")
def _transformer_lens():
    """Imported when the first test here runs, not at collection: every xdist worker
    collects every file, and this import (~7 s of CPU) is the suite's heaviest."""
    pytest.importorskip("transformer_lens")


def _config(model: nt.LanguageModel, **options):
    from transformer_lens import HookedTransformerConfig

    c = model.config
    return HookedTransformerConfig(
        n_layers=c.decoder_layers, d_model=c.layer, n_ctx=16, d_head=c.key,
        n_heads=c.heads, d_mlp=c.hidden, d_vocab=VOCAB, dtype=torch.float64,
        use_attn_result=True, default_prepend_bos=False, **options,
    )  # fmt: skip


def _lens(config, state: dict):
    """A HookedTransformer holding ``state``; every parameter it has beyond it is a
    bias left at zero."""
    from transformer_lens import HookedTransformer

    lens = HookedTransformer(config)
    lens.load_state_dict({k: v.detach() for k, v in state.items()}, strict=False)
    left = [(k, p) for k, p in lens.named_parameters() if k not in state]
    assert all(not p.any() for _, p in left), [k for k, _ in left]
    return lens


def _lens_gpt2(model: nt.LanguageModel):
    """A HookedTransformer with ``model``'s weights (GPT-2 layout), float64."""
    state = {
        "embed.W_E": model.embedding.table, "pos_embed.W_pos": model.positions.table,
        "ln_final.w": model.blocks.norm.gamma, "ln_final.b": model.blocks.norm.beta,
        "unembed.W_U": model.generator.table.T, "unembed.b_U": model.generator.bias,
    }  # fmt: skip
    for i, block in enumerate(model.blocks.layers):
        a, f = block.self_attention, block.feed_forward
        norms = block.attention_residual.norm, block.feed_forward_residual.norm
        state |= {
            f"blocks.{i}.ln1.w": norms[0].gamma, f"blocks.{i}.ln1.b": norms[0].beta,
            f"blocks.{i}.ln2.w": norms[1].gamma, f"blocks.{i}.ln2.b": norms[1].beta,
            f"blocks.{i}.attn.W_Q": a.w_q, f"blocks.{i}.attn.W_K": a.w_k,
            f"blocks.{i}.attn.W_V": a.w_v, f"blocks.{i}.attn.W_O": a.w_o,
            f"blocks.{i}.attn.b_Q": a.b_q, f"blocks.{i}.attn.b_K": a.b_k,
            f"blocks.{i}.attn.b_V": a.b_v, f"blocks.{i}.attn.b_O": a.b_o,
            f"blocks.{i}.mlp.W_in": f.w1.T, f"blocks.{i}.mlp.b_in": f.b1,
            f"blocks.{i}.mlp.W_out": f.w2.T, f"blocks.{i}.mlp.b_out": f.b2,
        }  # fmt: skip
    config = _config(model, act_fn="gelu_new", normalization_type="LN")
    return _lens(config, state)


def _lens_llama(model: nt.LanguageModel):
    """A HookedTransformer with ``model``'s weights (Llama layout: RMSNorm, SwiGLU,
    rotary, grouped key/value heads), float64."""
    c = model.config
    state = {
        "embed.W_E": model.embedding.table, "ln_final.w": model.blocks.norm.gamma,
        "unembed.W_U": model.generator.table.T,
    }  # fmt: skip
    for i, block in enumerate(model.blocks.layers):
        a, f = block.self_attention, block.feed_forward
        norms = block.attention_residual.norm, block.feed_forward_residual.norm
        state |= {
            f"blocks.{i}.ln1.w": norms[0].gamma, f"blocks.{i}.ln2.w": norms[1].gamma,
            f"blocks.{i}.attn.W_Q": a.w_q, f"blocks.{i}.attn._W_K": a.w_k,
            f"blocks.{i}.attn._W_V": a.w_v, f"blocks.{i}.attn.W_O": a.w_o,
            f"blocks.{i}.mlp.W_gate": f.w_gate.T, f"blocks.{i}.mlp.W_in": f.w_up.T,
            f"blocks.{i}.mlp.W_out": f.w_down.T,
        }  # fmt: skip
    config = _config(
        model, n_key_value_heads=c.kv_heads, act_fn="silu", normalization_type="RMS",
        final_rms=True, gated_mlp=True, positional_embedding_type="rotary",
        rotary_dim=c.key, rotary_base=int(c.positions.base), eps=c.eps,
    )  # fmt: skip
    return _lens(config, state)


def _randomise(model):
    """Every parameter moved at random (norm gains and biases are 1 and 0 at first)."""
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in model.parameters():
            noise = torch.randn(
                parameter.shape, generator=generator, dtype=torch.float64
            )
            parameter.copy_(parameter + 0.1 * noise)
    return model


# TransformerLens's name (block i) -> ours (block b), and the axes its tensor has
SHARED = {
    "hook_embed": ("embedding.embedded", "*batch seq layer"),
    "blocks.{i}.hook_resid_pre": ("{b}.attention_residual.inputs", "*batch seq layer"),
    "blocks.{i}.attn.hook_q": ("{b}.self_attention.queries", "*batch seq_q heads key"),
    "blocks.{i}.attn.hook_k": ("{b}.self_attention.keys", "*batch seq kv_heads key"),
    "blocks.{i}.attn.hook_v": ("{b}.self_attention.values", "*batch seq kv_heads val"),
    "blocks.{i}.attn.hook_attn_scores": (
        "{b}.self_attention.scores", "*batch heads seq_q seq"),
    "blocks.{i}.attn.hook_pattern": (
        "{b}.self_attention.weights", "*batch heads seq_q seq"),
    "blocks.{i}.attn.hook_z": ("{b}.self_attention.attended", "*batch seq_q heads val"),
    "blocks.{i}.attn.hook_result": (
        "{b}.self_attention.contributions", "*batch seq_q heads layer"),
    "blocks.{i}.hook_attn_out": ("{b}.attention_residual.sublayer", "*batch seq layer"),
    "blocks.{i}.hook_resid_mid": ("{b}.attention_residual.outputs", "*batch seq layer"),
    "blocks.{i}.mlp.hook_post": ("{b}.feed_forward.activated", "*batch hidden"),
    "blocks.{i}.hook_mlp_out": (
        "{b}.feed_forward_residual.sublayer", "*batch seq layer"),
    "blocks.{i}.hook_resid_post": (
        "{b}.feed_forward_residual.outputs", "*batch seq layer"),
    "unembed.hook_in": ("blocks.norm.normalised", "*batch layer"),
    "unembed.hook_out": ("generator.logits", "*batch seq vocab"),
}  # fmt: skip
# TransformerLens's norms record x̂ before the gain (and shift): ours "standardized"
# (LayerNorm) and "scaled" (RMSNorm); the norm's output is ours "normalised"
GPT2_NAMES = SHARED | {
    "blocks.{i}.ln1.hook_normalized": (
        "{b}.attention_residual.norm.standardized", "*batch layer"),
    "blocks.{i}.ln2.hook_normalized": (
        "{b}.feed_forward_residual.norm.standardized", "*batch layer"),
    "ln_final.hook_normalized": ("blocks.norm.standardized", "*batch layer"),
    "blocks.{i}.mlp.hook_pre": ("{b}.feed_forward.hidden", "*batch hidden"),
}  # fmt: skip
LLAMA_NAMES = SHARED | {
    "blocks.{i}.ln1.hook_normalized": (
        "{b}.attention_residual.norm.scaled", "*batch layer"),
    "blocks.{i}.ln2.hook_normalized": (
        "{b}.feed_forward_residual.norm.scaled", "*batch layer"),
    "ln_final.hook_normalized": ("blocks.norm.scaled", "*batch layer"),
    "blocks.{i}.attn.hook_rot_q": (
        "{b}.self_attention.rotated_queries", "*batch seq_q heads key"),
    "blocks.{i}.attn.hook_rot_k": (
        "{b}.self_attention.rotated_keys", "*batch seq kv_heads key"),
    "blocks.{i}.mlp.hook_pre": ("{b}.feed_forward.gate", "*batch hidden"),
    "blocks.{i}.mlp.hook_pre_linear": ("{b}.feed_forward.up", "*batch hidden"),
}  # fmt: skip
# the one value TransformerLens records and the equations do not tap: the norm's
# divisor sqrt(var + eps) (or the root mean square), computed inside standardize
NOT_TAPPED = {"ln1.hook_scale", "ln2.hook_scale", "ln_final.hook_scale"}


def _compare(lens_cache, found, names, layers) -> set[str]:
    compared = set()
    for lens_name, (ours, axes) in names.items():
        for i in range(layers) if "{i}" in lens_name else [None]:
            key = lens_name.format(i=i)
            expected = lens_cache[key]
            actual = found[ours.format(b=f"blocks.layers.{i}")].to(axes)
            if key.endswith("hook_attn_scores"):  # TransformerLens writes -inf
                allowed = expected > -torch.inf  # where the causal mask blocks
                expected, actual = expected[allowed], actual[allowed]
            torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12,
                                       msg=key)  # fmt: skip
            compared.add(key)
    return compared


def _not_compared(cache, compared: set[str]) -> set[str]:
    left = {k for k in cache.keys() if k not in compared}
    return {k.split(".", 2)[-1] if k.startswith("blocks") else k for k in left}


def test_every_activation_transformer_lens_records_equals_ours_gpt2():
    model = _randomise(gpt2_layout(torch.float64))
    lens, tokens = _lens_gpt2(model), _tokens(3, 9)
    logits, cache = lens.run_with_cache(tokens)
    with record(model) as found:
        model(tokens)
    compared = _compare(cache, found, GPT2_NAMES, 2)
    table = found["positions.table"].to("seq layer")  # one table for the whole batch
    torch.testing.assert_close(cache["hook_pos_embed"], table.expand(3, 9, 12))
    assert _not_compared(cache, compared | {"hook_pos_embed"}) == NOT_TAPPED
    torch.testing.assert_close(found["generator.logits"].tensor, logits, rtol=1e-12,
                               atol=1e-12)  # fmt: skip


def test_every_activation_transformer_lens_records_equals_ours_llama():
    model = _randomise(llama_layout(torch.float64))
    lens, tokens = _lens_llama(model), _tokens(3, 9)
    _, cache = lens.run_with_cache(tokens)
    with record(model) as found:
        model(tokens)
    compared = _compare(cache, found, LLAMA_NAMES, 2)
    assert _not_compared(cache, compared) == NOT_TAPPED


def test_direct_logit_attribution_equals_transformer_lens_stacked_head_results():
    model = _randomise(gpt2_layout(torch.float64))
    lens, tokens = _lens_gpt2(model), _tokens(3, 9)
    _, cache = lens.run_with_cache(tokens)
    with record(model) as found:
        model(tokens)
    ours = nt.direct_logit_attribution(model, found, tokens)
    # components (layer, head) x batch x pos x d_model, through ln_final's scale
    stacked = cache.stack_head_results(layer=-1, apply_ln=True) * lens.ln_final.w
    directions = lens.W_U.T[tokens]  # batch pos d_model
    expected = (stacked * directions).sum(-1).reshape(2, 3, 3, 9)
    torch.testing.assert_close(ours.tensor, expected, rtol=1e-10, atol=1e-10)
