"""The Llama block through the named equations, proven equal to `transformers`.

RMSNorm against `torch.nn.RMSNorm` and `LlamaRMSNorm`; the gated feed-forward against
`LlamaMLP`; random tiny `LlamaForCausalLM`, `Qwen2ForCausalLM` and
`MistralForCausalLM` (several head ratios, tied and untied, three rotary bases, a
window, biases) against the named `LanguageModel` converted by `from_huggingface`:
log-probabilities, logits, every layer's hidden states and every gradient in float64
to 1e-10; the round trip through `to_huggingface`; each refused config's one line.

`transformers` computes RMSNorm and the rotary angles in float32 whatever the model's
dtype (a choice for half-precision models), and its eager attention the softmax too.
For the float64 comparison those two steps are replaced by the same equations in
float64 (:func:`in_float64`) and the attention is PyTorch's
`scaled_dot_product_attention` ("sdpa", which keeps float64); a float32 comparison
runs the reference unchanged. Nothing is downloaded.
"""

from __future__ import annotations

import copy
import os
import types

import pytest
import torch
from jaxtyping import TypeCheckError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
hf = pytest.importorskip("transformers")

import named_transformer as nt  # noqa: E402
from named_transformer.core.masks import causal_mask, sliding_window_mask  # noqa: E402

# ------------------------------------------------------------------ the equations


def test_rms_norm_is_its_equation_and_equals_torch_and_llama():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 12, dtype=torch.float64)
    gain = torch.randn(12, dtype=torch.float64)
    ours = nt.rms_norm(x, gain, 1e-6)
    by_hand = x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * gain
    torch.testing.assert_close(ours, by_hand, atol=1e-14, rtol=0)
    reference = torch.nn.RMSNorm(12, eps=1e-6, dtype=torch.float64)
    module = nt.RMSNorm(12, eps=1e-6).double()
    with torch.no_grad():
        reference.weight.copy_(gain)
        module.gamma.copy_(gain)
    assert (module(x) - reference(x)).abs().max() <= 1e-14
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    llama = LlamaRMSNorm(12, eps=1e-5)  # float32, as it always computes
    module32 = nt.RMSNorm(12, eps=1e-5)
    with torch.no_grad():
        llama.weight.copy_(gain.float())
        module32.gamma.copy_(gain.float())
    assert (module32(x.float()) - llama(x.float())).abs().max() <= 1e-6
    half = x.bfloat16()  # both normalise in float32, then return to bfloat16
    with torch.no_grad():
        llama.bfloat16(), module32.bfloat16()
    assert torch.equal(module32(half), llama(half))


def llama_mlp(layer: int, hidden: int, bias: bool, activation: str = "silu"):
    from transformers.models.llama.modeling_llama import LlamaMLP

    config = hf.LlamaConfig(hidden_size=layer, intermediate_size=hidden,
                            num_attention_heads=2, mlp_bias=bias,
                            hidden_act=activation)  # fmt: skip
    return LlamaMLP(config).double()


@pytest.mark.parametrize(
    ("bias", "activation"), [(False, "silu"), (True, "silu"), (False, "gelu")]
)
def test_gated_feed_forward_equals_llama_mlp(bias, activation):
    torch.manual_seed(1)
    theirs = llama_mlp(12, 22, bias, activation)
    ours = nt.GatedFeedForward(12, 22, bias=bias, activation=activation).double()
    with torch.no_grad():
        ours.w_gate.copy_(theirs.gate_proj.weight)
        ours.w_up.copy_(theirs.up_proj.weight)
        ours.w_down.copy_(theirs.down_proj.weight)
        if bias:
            ours.b_gate.copy_(theirs.gate_proj.bias)
            ours.b_up.copy_(theirs.up_proj.bias)
            ours.b_down.copy_(theirs.down_proj.bias)
    x = torch.randn(2, 7, 12, dtype=torch.float64)
    assert (ours(x) - theirs(x)).abs().max() <= 1e-13


def test_the_functional_equations_have_their_gradients():
    torch.manual_seed(2)
    double = {"dtype": torch.float64, "requires_grad": True}
    x, gain = torch.randn(2, 3, 5, **double), torch.randn(5, **double)
    assert torch.autograd.gradcheck(lambda a, g: nt.rms_norm(a, g), (x, gain))
    weights = (torch.randn(4, 5, **double), torch.randn(4, 5, **double),
               torch.randn(5, 4, **double))  # fmt: skip
    assert torch.autograd.gradcheck(nt.gated_feed_forward, (x, *weights))


def test_wrong_shapes_name_the_argument():
    x = torch.randn(2, 3, 5)
    with pytest.raises(TypeCheckError, match="'gain'"):
        nt.rms_norm(x, torch.ones(6))
    with pytest.raises(TypeCheckError, match="'w_up'"):
        nt.gated_feed_forward(x, torch.ones(4, 5), torch.ones(3, 5), torch.ones(5, 4))
    with pytest.raises(TypeCheckError, match="'inputs'"):
        nt.RMSNorm(6)(x)
    with pytest.raises(TypeCheckError, match="'inputs'"):
        nt.GatedFeedForward(6, 4)(x)


def test_unknown_kinds_are_refused_in_one_line():
    with pytest.raises(ValueError,
                       match="norm must be 'layer', 'rms' or None, got 'batch'"):
        nt.TransformerConfig(norm="batch")
    with pytest.raises(ValueError,
                       match="feed_forward must be 'plain', 'gated' or None"):
        nt.TransformerConfig(feed_forward="glu")
    with pytest.raises(ValueError, match=r"positions must be one of \[.*'rotary'"):
        nt.LanguageModel(11, nt.TransformerConfig(layer=8, heads=2, hidden=8),
                         positions="nope")  # fmt: skip
    with pytest.raises(ValueError, match="relative positions take no 'k'"):
        nt.TransformerConfig(positions={"kind": "relative", "k": 3})
    # a kind's name is its scheme with the defaults (Shaw et al.'s k is not given)
    assert nt.TransformerConfig(positions="relative").positions == nt.Relative(8)


def test_the_defaults_build_the_papers_model_unchanged():
    c = nt.TransformerConfig()
    assert (c.norm, c.feed_forward, c.bias) == ("layer", "plain", True)
    assert c.qkv_bias is None
    model = nt.LanguageModel(11, nt.TransformerConfig(layer=8, heads=2, hidden=8,
                                                      decoder_layers=1))  # fmt: skip
    block = model.blocks.layers[0]
    assert type(block.feed_forward) is nt.FeedForward
    assert type(block.attention_residual.norm) is nt.LayerNorm
    assert type(block.self_attention) is nt.MultiHeadAttention
    assert block.self_attention.b_o is not None


def test_the_llama_block_is_options_of_the_one_model():
    config = nt.TransformerConfig.llama(
        layer=12, heads=6, kv_heads=2, hidden=20, decoder_layers=2,
        positions=nt.Rotary(500000.0),
    )  # fmt: skip
    model = nt.LanguageModel(13, config, scale_embeddings=False)
    block = model.blocks.layers[0]
    assert block.self_attention.positions == nt.Rotary(500000.0)
    assert block.self_attention.kv_heads == 2
    assert isinstance(block.feed_forward, nt.GatedFeedForward)
    assert isinstance(model.blocks.norm, nt.RMSNorm)
    names = [name for name, _ in model.named_parameters()]
    assert not [n for n in names if ".b_" in n or "beta" in n]  # no biases at all
    qwen = nt.LanguageModel(13, nt.TransformerConfig.llama(layer=12, heads=6,
                            hidden=20, qkv_bias=True), positions="rotary")  # fmt: skip
    attention = qwen.blocks.layers[0].self_attention
    assert attention.b_q is not None and attention.b_o is None


# ------------------------------------------------- Llama, Qwen2, Mistral both ways

CONFIGS = {
    "llama-gqa-untied": ("llama", dict(
        vocab_size=37, hidden_size=24, num_attention_heads=6, num_key_value_heads=2,
        num_hidden_layers=2, intermediate_size=40, tie_word_embeddings=False)),
    "llama-mha-tied-theta5e5": ("llama", dict(
        vocab_size=29, hidden_size=16, num_attention_heads=4, num_hidden_layers=1,
        intermediate_size=30, tie_word_embeddings=True, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    "llama-mqa-biases": ("llama", dict(
        vocab_size=31, hidden_size=24, num_attention_heads=4, num_key_value_heads=1,
        num_hidden_layers=2, intermediate_size=26, attention_bias=True,
        mlp_bias=True, tie_word_embeddings=False)),
    "qwen2-tied-theta1e6": ("qwen2", dict(
        vocab_size=41, hidden_size=24, num_attention_heads=6, num_key_value_heads=3,
        num_hidden_layers=2, intermediate_size=34, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen2-window": ("qwen2", dict(
        vocab_size=23, hidden_size=16, num_attention_heads=2, num_key_value_heads=1,
        num_hidden_layers=2, intermediate_size=18, use_sliding_window=True,
        sliding_window=4, max_window_layers=0)),
    "mistral-window-untied": ("mistral", dict(
        vocab_size=43, hidden_size=32, num_attention_heads=8, num_key_value_heads=2,
        num_hidden_layers=2, intermediate_size=36, sliding_window=5,
        tie_word_embeddings=False)),
}  # fmt: skip
CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", "LlamaModel"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "Qwen2Model"),
    "mistral": ("MistralConfig", "MistralForCausalLM", "MistralModel"),
}


def reference(name: str, dtype=torch.float32, base: bool = False, **extra):
    """A random tiny model of ``name`` (sdpa attention, no special tokens), with
    weights drawn wider than the default so that every part matters."""
    family, sizes = CONFIGS[name]
    config_class, model_class, base_class = (getattr(hf, c) for c in CLASSES[family])
    config = config_class(**sizes, **extra, initializer_range=0.3, bos_token_id=None,
                          eos_token_id=None, pad_token_id=None)  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(sizes["vocab_size"])
    model = (base_class if base else model_class)(config)
    with torch.no_grad():  # RMSNorm gains other than ones, biases other than zeros
        for parameter_name, parameter in model.named_parameters():
            if parameter_name.endswith(("norm.weight", "bias")):
                parameter.uniform_(0.5, 1.5)
    return model.to(dtype).eval()


def _rms_norm_in_dtype(self, hidden_states):
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _rotary_in_dtype(self, x, position_ids, *args, **kwargs):
    dim = self.inv_freq.shape[0] * 2
    base = self.config.rope_parameters["rope_theta"]
    exponents = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    inverse = 1.0 / base**exponents
    angles = position_ids[..., None].double() * inverse
    both = torch.cat((angles, angles), dim=-1)  # rotate_half's layout: i and i + d/2
    return both.cos().to(x.dtype), both.sin().to(x.dtype)


def in_float64(model):
    """The reference with its RMSNorm and rotary angles computed in the model's dtype:
    the same equations, without the float32 round trip."""
    for module in model.modules():
        kind = type(module).__name__
        if kind.endswith("RMSNorm"):
            module.forward = types.MethodType(_rms_norm_in_dtype, module)
        elif kind.endswith("RotaryEmbedding"):
            module.forward = types.MethodType(_rotary_in_dtype, module)
    return model


def tokens(vocab: int, seq: int = 9):
    return torch.randint(0, vocab, (3, seq), generator=torch.Generator().manual_seed(7))


def layer_outputs(ours: nt.LanguageModel, batch: torch.Tensor) -> list[torch.Tensor]:
    """The input of the first block, each block's output, the final normed states."""
    seq, window = batch.shape[-1], ours.config.window
    mask = (
        causal_mask(seq)
        if window is None
        else sliding_window_mask(seq, window=window)
    )
    states = [ours.positions(ours.embedding(batch))]
    for block in ours.blocks.layers:
        states.append(block(states[-1], mask))
    return states[:-1] + [ours.hidden_states(batch)]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_float64_logits_hidden_states_equal_to_1e_10(name):
    theirs = in_float64(reference(name, torch.float64))
    ours = nt.from_huggingface(theirs)
    family, sizes = CONFIGS[name]
    assert isinstance(ours, nt.LanguageModel)
    assert ours.config.kv_heads == sizes.get("num_key_value_heads", ours.config.heads)
    batch = tokens(sizes["vocab_size"], seq=11)  # longer than every window
    with torch.no_grad():
        expected = theirs(batch, output_hidden_states=True)
        mine = layer_outputs(ours, batch)
        log_probs = ours(batch)
        logits = mine[-1] @ ours.generator.table.T
    assert len(mine) == len(expected.hidden_states)
    for layer, (state, their_state) in enumerate(
        zip(mine, expected.hidden_states, strict=True)
    ):
        assert (state - their_state).abs().max() <= 1e-10, layer
    assert (logits - expected.logits).abs().max() <= 1e-10
    assert (log_probs - expected.logits.log_softmax(-1)).abs().max() <= 1e-10


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_float32_log_probabilities_equal_the_unchanged_reference(name):
    theirs = reference(name)  # RMSNorm and rotary angles as transformers has them
    ours = nt.from_huggingface(theirs)
    batch = tokens(CONFIGS[name][1]["vocab_size"])
    with torch.no_grad():
        expected = theirs(batch).logits.log_softmax(-1)
        assert (ours(batch) - expected).abs().max() <= 2e-5


def our_gradients_in_their_layout(ours, model_type):
    gradients = copy.deepcopy(ours)
    for parameter, original in zip(
        gradients.parameters(), ours.parameters(), strict=True
    ):
        parameter.data = original.grad.clone()
    return dict(nt.to_huggingface(gradients, model_type=model_type).named_parameters())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_float64_gradients_of_every_weight_equal_to_1e_10(name):
    theirs = in_float64(reference(name, torch.float64))
    ours = nt.from_huggingface(theirs)
    family, sizes = CONFIGS[name]
    batch = tokens(sizes["vocab_size"], seq=8)
    direction = torch.randn(3, 8, sizes["vocab_size"], dtype=torch.float64)
    (theirs(batch).logits.log_softmax(-1) * direction).sum().backward()
    (ours(batch) * direction).sum().backward()
    mine = our_gradients_in_their_layout(ours, family)
    reference_gradients = {n: p.grad for n, p in theirs.named_parameters()}
    assert set(mine) == set(reference_gradients)
    for weight, gradient in reference_gradients.items():
        assert (mine[weight] - gradient).abs().max() <= 1e-10, weight


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_to_huggingface_gives_back_the_same_class_and_tensors(name):
    theirs = reference(name, torch.float64)
    again = nt.to_huggingface(nt.from_huggingface(theirs))
    assert type(again) is type(theirs)
    state = again.state_dict()
    for weight, tensor in theirs.state_dict().items():
        assert state[weight].dtype == torch.float64, weight
        assert torch.equal(state[weight], tensor), weight
    assert again.config.tie_word_embeddings == theirs.config.tie_word_embeddings


@pytest.mark.parametrize("name", ["llama-gqa-untied", "qwen2-window"])
def test_the_base_models_convert_too(name):
    theirs = in_float64(reference(name, torch.float64, base=True))
    ours = nt.from_huggingface(theirs)
    batch = tokens(CONFIGS[name][1]["vocab_size"])
    with torch.no_grad():
        expected = theirs(batch).last_hidden_state
        assert (ours.hidden_states(batch) - expected).abs().max() <= 1e-10


def test_cached_greedy_decoding_equals_generate():
    theirs = reference("mistral-window-untied")
    ours = nt.from_huggingface(theirs)
    prompt = torch.tensor([[3, 1, 4, 1, 5], [2, 7, 1, 8, 2]])
    with torch.no_grad():
        expected = theirs.generate(
            prompt, do_sample=False, max_new_tokens=12, pad_token_id=0
        )[:, 5:]
    decoded = nt.greedy(nt.IncrementalDecoder(ours), prompt, max_len=12)
    assert len(set(expected.flatten().tolist())) > 3  # not a constant sequence
    assert decoded.tokens.tolist() == expected.tolist()


def test_the_name_tables_list_every_tensor():
    qwen = nt.checkpoint_names("qwen2")
    assert ("layers.{i}.self_attn.k_proj.weight", "blocks.layers.{i}.self_attention"
            ".w_k", "(kv_heads key) layer -> kv_heads layer key") in qwen  # fmt: skip
    assert any(theirs.endswith("q_proj.bias") for theirs, _, _ in qwen)
    assert not any(t.endswith("bias") for t, _, _ in nt.checkpoint_names("llama"))
    with pytest.raises(ValueError, match="family must be one of"):
        nt.checkpoint_names("t5")


@pytest.mark.parametrize(
    "theirs",
    ["gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu", "swish"],
)
def test_each_activation_name_a_config_gives_is_transformers_own(theirs):
    from transformers.activations import ACT2FN

    from named_transformer.interop.huggingface import _activation
    from named_transformer.models.sublayers import ACTIVATIONS

    x = torch.linspace(-12, 12, 2001, dtype=torch.float64)
    ours = ACTIVATIONS[_activation(theirs)](x)
    assert (ours - ACT2FN[theirs](x)).abs().max() <= 1e-10


def test_a_gelu_fast_model_converts_and_equals_its_reference():
    # 0.8.3 refused hidden_act="gelu_fast", the tanh GELU it has
    theirs = in_float64(reference("llama-gqa-untied", torch.float64,
                                  hidden_act="gelu_fast"))  # fmt: skip
    ours = nt.from_huggingface(theirs)
    assert ours.blocks.layers[0].feed_forward.activation == "gelu_tanh"
    batch = tokens(CONFIGS["llama-gqa-untied"][1]["vocab_size"])
    with torch.no_grad():
        expected = theirs(batch).logits.log_softmax(-1)
        assert (ours(batch) - expected).abs().max() <= 1e-10


# --------------------------------------------------------- configs that do not fit


@pytest.mark.parametrize(
    ("name", "change", "line"),
    [
        ("llama-gqa-untied",
         dict(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0,
                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64}),
         "config rope_parameters rope_type='llama3' does not convert: the named "
         "rotary positions are unscaled ('default')"),
        ("llama-gqa-untied", dict(head_dim=8),
         "config head_dim=8 does not convert: the named heads are hidden_size / "
         "num_attention_heads = 4 wide"),
        ("llama-gqa-untied", dict(attention_bias=True),
         "config attention_bias=True with mlp_bias=False does not convert: the named "
         "block has biases everywhere or nowhere"),
        ("llama-gqa-untied", dict(attention_dropout=0.1),
         "config attention_dropout=0.1 does not convert: the named model's dropout "
         "would drop more than the weights"),
        ("llama-gqa-untied", dict(hidden_act="tanh"),
         "activation 'tanh' has no named counterpart"),
        ("qwen2-window", dict(max_window_layers=1),
         "config layer_types=['full_attention', 'sliding_attention'] does not "
         "convert: the named model slides one window over every layer or none"),
    ],
)  # fmt: skip
def test_configs_the_named_code_does_not_implement_are_refused_in_one_line(
    name, change, line
):
    family, sizes = CONFIGS[name]
    state = reference(name).state_dict()
    config = getattr(hf, CLASSES[family][0])(**{**sizes, **change}).to_dict()
    with pytest.raises(ValueError) as error:
        nt.from_huggingface(config, state)
    assert str(error.value) == line


def test_an_older_qwen2_config_without_layer_types_is_read_from_max_window_layers():
    family, sizes = CONFIGS["qwen2-window"]
    config = hf.Qwen2Config(**sizes).to_dict()
    state = reference("qwen2-window").state_dict()
    del config["layer_types"]
    assert nt.from_huggingface(config, state).config.window == 4
    with pytest.raises(ValueError, match=r"^config layer_types=\['full_attention', "):
        nt.from_huggingface(dict(config, max_window_layers=1), state)


def test_partial_rotary_factor_is_refused():
    family, sizes = CONFIGS["llama-gqa-untied"]
    config = dict(hf.LlamaConfig(**sizes).to_dict(), partial_rotary_factor=0.5)
    with pytest.raises(ValueError, match="^config partial_rotary_factor=0.5 does"):
        nt.from_huggingface(config, reference("llama-gqa-untied").state_dict())


def test_models_transformers_cannot_express_say_why():
    ours = nt.from_huggingface(reference("qwen2-window"))
    with pytest.raises(ValueError, match="^model_type must be one of"):
        nt.to_huggingface(ours, model_type="gpt2")
    with pytest.raises(ValueError, match="these biases are not mistral's$"):
        nt.to_huggingface(ours, model_type="mistral")
    scaled = nt.LanguageModel(11, nt.TransformerConfig.llama(layer=8, heads=2,
                              hidden=8), positions="rotary")  # fmt: skip
    with pytest.raises(ValueError, match="Llama does not scale its embeddings$"):
        nt.to_huggingface(scaled)
    rms_gpt2 = nt.LanguageModel(
        11, nt.TransformerConfig(layer=8, heads=2, hidden=8, norm_first=True,
                                 norm="rms"),
        positions="learned", scale_embeddings=False, output_bias=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match="GPT-2 has LayerNorm and a plain"):
        nt.to_huggingface(rms_gpt2)


# ------------------------------------------------------------- the other paths


def test_the_model_kinds_build_the_same_block_from_a_spec():

    from named_transformer.workflows.spec import RunSpec

    config = nt.TransformerConfig.llama(layer=12, heads=6, kv_heads=3, hidden=20,
                                        decoder_layers=2, qkv_bias=True)  # fmt: skip
    spec = RunSpec.from_dict({"task": "copy", "kind": "decoder-only", "size": "tiny",
                              "vocab": 13, "config": config.to_dict()})  # fmt: skip
    built = spec.kind.build(spec)
    direct = nt.LanguageModel(13, config)
    shapes = {name: p.shape for name, p in direct.named_parameters()}
    assert {name: p.shape for name, p in built.named_parameters()} == shapes
    assert built.blocks.layers[1].self_attention.positions == nt.Rotary()


def test_the_llama_block_compiles_whole_with_checks_off():
    config = nt.TransformerConfig.llama(layer=12, heads=6, kv_heads=2, hidden=20,
                                        decoder_layers=1, window=3)  # fmt: skip
    model = nt.LanguageModel(13, config, positions="rotary").eval()
    batch = tokens(13)
    with nt.shape_checks(False), torch.no_grad():
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        assert (compiled(batch) - model(batch)).abs().max() <= 1e-6


@pytest.mark.parametrize(
    "option",
    [dict(norm="rms"), dict(feed_forward="gated"), dict(norm=None),
     dict(feed_forward=None)],
)  # fmt: skip
def test_pytorch_layers_have_neither_and_say_so(option):
    (name, value), = option.items()
    said = f"^PyTorch's Transformer layers have a .*, not {name}={value!r}$"
    for layer_type in (nt.EncoderLayer, nt.DecoderLayer):
        with pytest.raises(ValueError, match=said):
            nt.to_torch(layer_type(8, 2, 16, **option))
