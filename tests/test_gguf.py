"""GGUF files: tiny ones written here the way llama.cpp's converter writes them, read
back equal to the Hugging Face model they came from and to transformers' own GGUF
loader; every bad file refused in one line; the Q4_1 and Q8_0 equations equal gguf's
dequantisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

import named_transformer as nt  # noqa: E402
from named_transformer.interop.gguf import read_gguf  # noqa: E402
from named_transformer.interop.quantization import (  # noqa: E402
    dequantize_q4_1,
    dequantize_q8_0,
)
from named_transformer.pretrained.smollm2 import Generation, load_gguf  # noqa: E402
from named_transformer.pretrained.tokenizer import gguf_tokenizer  # noqa: E402

Q = gguf.GGMLQuantizationType


def llama_cpp_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute), written as it is
    there: interleave the two rotary halves of every head's rows."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


# llama.cpp's names for Hugging Face's, per layer (the converter's table)
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
VOCAB = 40  # byte-level letters are enough for a tokenizer that round-trips


def tiny_reference(kind: str = "llama", *, tied: bool = True, kv_heads: int = 2):
    torch.manual_seed(0)
    options = dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=kv_heads,
        max_position_embeddings=64, rope_theta=500.0, rms_norm_eps=1e-5,
        tie_word_embeddings=tied,
    )  # fmt: skip
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**options))
    else:
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**options))
    with torch.no_grad():  # the norms' gains away from 1, so a mix-up shows
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.uniform_(0.5, 1.5)
    return model.eval()


def write_gguf(
    path, model, *, arch: str = "llama", qtype=Q.F32, extra=None, tensors=None
) -> None:
    """``model`` as llama.cpp's converter writes it (Q and K rows interleaved for
    llama), with a byte-level tokenizer whose control token 0 ends a turn."""
    config = model.config
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_tokenizer_model("gpt2")
    letters = [chr(c) for c in range(ord("a"), ord("a") + VOCAB - 4)]
    writer.add_token_list(["<|im_end|>", "<|im_start|>", "Ġ", *letters, "ab"])
    writer.add_token_types([3, 3, 1] + [1] * len(letters) + [1])
    writer.add_token_merges(["a b"])
    writer.add_eos_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endfor %}<|im_start|>assistant\n"
    )
    for key, value in (extra or {}).items():
        writer.add_key_value(key, *value)
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    for name, tensor in model.state_dict().items():
        array = tensor.numpy()
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        if arch == "llama" and "q_proj" in name:
            array = llama_cpp_permute(array, heads)
        if arch == "llama" and "k_proj" in name:
            array = llama_cpp_permute(array, kv)
        parts = name.removeprefix("model.").split(".")
        if parts[0] == "layers":
            theirs = f"blk.{parts[1]}.{LAYER_NAMES['.'.join(parts[2:])]}"
        else:
            theirs = {"embed_tokens.weight": "token_embd.weight",
                      "norm.weight": "output_norm.weight",
                      "lm_head.weight": "output.weight"}[name.removeprefix("model.")]
        if qtype != Q.F32 and array.ndim == 2:
            writer.add_tensor(theirs, gguf.quants.quantize(array, qtype),
                              raw_dtype=qtype)  # fmt: skip
        else:
            writer.add_tensor(theirs, array)
    for name, array in (tensors or {}).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def log_probs(model, tokens):
    with torch.no_grad():
        return torch.log_softmax(model(tokens).logits.double(), -1)


TOKENS = torch.tensor([[3, 7, 1, 20, 30, 5, 9, 2, 11]])


@pytest.mark.parametrize(
    "kind, tied, kv_heads",
    [("llama", True, 2), ("llama", False, 1), ("llama", True, 4), ("qwen2", True, 2)],
)
def test_a_gguf_file_reads_back_as_the_model_it_was_written_from(
    tmp_path, kind, tied, kv_heads
):
    reference = tiny_reference(kind, tied=tied, kv_heads=kv_heads)
    path = tmp_path / "tiny.gguf"
    write_gguf(path, reference, arch=kind)
    ours = nt.from_gguf(path)
    assert ours.config.kv_heads == kv_heads
    assert (ours.generator.table is ours.embedding.table) == tied
    with torch.no_grad():
        named = ours(TOKENS).double()
    torch.testing.assert_close(named, log_probs(reference, TOKENS), atol=1e-5, rtol=0)


def test_undoing_the_interleaving_is_what_makes_them_equal(tmp_path):
    """The rows read as stored (interleaved) give another model: the permutation
    matters, and from_gguf undoes it."""
    reference = tiny_reference()
    path = tmp_path / "tiny.gguf"
    write_gguf(path, reference)
    checkpoint = read_gguf(path)
    stored = checkpoint.stored_bytes("layers.0.self_attn.q_proj.weight")
    raw = torch.from_numpy(stored.copy()).view(torch.float32)  # F32 rows as stored
    ours = checkpoint.tensor("layers.0.self_attn.q_proj.weight")
    truth = reference.state_dict()["model.layers.0.self_attn.q_proj.weight"]
    assert torch.equal(ours, truth)
    assert not torch.equal(raw, truth)


def test_quantised_files_equal_transformers_gguf_loader(tmp_path):
    """Q8_0 weights: the named model equals transformers' LlamaForCausalLM loaded
    from the same file (both dequantise with gguf)."""
    reference = tiny_reference(tied=False)
    write_gguf(tmp_path / "q8.gguf", reference, qtype=Q.Q8_0)
    theirs = transformers.LlamaForCausalLM.from_pretrained(
        tmp_path, gguf_file="q8.gguf", dtype=torch.float32
    ).eval()
    ours = nt.from_gguf(tmp_path / "q8.gguf")
    with torch.no_grad():
        named = ours(TOKENS).double()
    torch.testing.assert_close(named, log_probs(theirs, TOKENS), atol=1e-5, rtol=0)
    # and quantisation moved the weights: the comparison is not the F32 one again
    assert not torch.allclose(named, log_probs(reference, TOKENS), atol=1e-5)


def test_the_tokenizer_and_template_of_a_file(tmp_path):
    write_gguf(tmp_path / "tiny.gguf", tiny_reference())
    tokenizer = gguf_tokenizer(read_gguf(tmp_path / "tiny.gguf"))
    assert tokenizer.encode("abc") == [VOCAB - 1, 5]  # "ab" merged, then "c"
    assert tokenizer.encode("c<|im_end|>") == [5, 0]  # a control token kept whole
    assert tokenizer.decode([VOCAB - 1, 5, 2, 3]) == "abc a"
    assert tokenizer.end_of_turn == 0
    rendered = tokenizer.render([{"role": "user", "content": "hi"}])
    # Jinja drops a template's own last newline (transformers renders it alike)
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant"


def test_a_chat_model_generates_what_greedy_decoding_does(tmp_path):
    """The streamed text is the greedy continuation of the independent reference."""
    reference = tiny_reference()
    write_gguf(tmp_path / "tiny.gguf", reference)
    chat = load_gguf(tmp_path / "tiny.gguf")
    prompt = chat.tokenizer.encode("abcde")
    pieces = []
    text = chat.continue_tokens(
        prompt, Generation(max_new_tokens=8), on_text=pieces.append
    )
    theirs = reference.generate(
        torch.tensor([prompt]), max_new_tokens=8, do_sample=False, eos_token_id=0,
        pad_token_id=0,
    )[0, len(prompt) :].tolist()  # fmt: skip
    if 0 in theirs:
        theirs = theirs[: theirs.index(0)]
    assert text == chat.tokenizer.decode(theirs)
    assert "".join(pieces) == text


def bad(tmp_path, name: str, content: bytes):
    path = tmp_path / name
    path.write_bytes(content)
    return path


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_bad_files_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError) as error:
        nt.from_gguf(tmp_path / "missing.gguf")
    assert "no GGUF file at" in one_line(error)
    with pytest.raises(ValueError) as error:
        nt.from_gguf(bad(tmp_path, "text.gguf", b"hello, not a model"))
    assert "is not a GGUF file: it starts with b'hell'" in one_line(error)
    write_gguf(tmp_path / "whole.gguf", tiny_reference())
    whole = (tmp_path / "whole.gguf").read_bytes()
    with pytest.raises(ValueError) as error:
        nt.from_gguf(bad(tmp_path, "cut.gguf", whole[: len(whole) // 2]))
    assert "is not a readable GGUF file (truncated or damaged" in one_line(error)


def test_an_architecture_other_than_llama_or_qwen2_is_refused(tmp_path):
    reference = tiny_reference()
    write_gguf(tmp_path / "phi.gguf", reference, arch="phi3")
    with pytest.raises(ValueError) as error:
        nt.from_gguf(tmp_path / "phi.gguf")
    assert one_line(error) == (
        "GGUF architecture 'phi3' is not supported: llama, qwen2 are"
    )


def test_a_scaled_rotary_scheme_is_refused(tmp_path):
    extra = {"llama.rope.scaling.type": ("yarn", gguf.GGUFValueType.STRING)}
    write_gguf(tmp_path / "yarn.gguf", tiny_reference(), extra=extra)
    with pytest.raises(ValueError) as error:
        nt.from_gguf(tmp_path / "yarn.gguf")
    assert "llama.rope.scaling.type='yarn' is not supported" in one_line(error)


def test_a_tensor_type_gguf_cannot_dequantise_is_named(tmp_path):
    write_gguf(tmp_path / "q8k.gguf", tiny_reference())
    checkpoint = read_gguf(tmp_path / "q8k.gguf")
    stored = checkpoint.tensors["layers.0.mlp.up_proj.weight"]
    # the same bytes declared Q8_K, a type gguf's Python code does not dequantise
    checkpoint.tensors["layers.0.mlp.up_proj.weight"] = stored._replace(kind=Q.Q8_K)
    with pytest.raises(ValueError) as error:
        checkpoint.tensor("layers.0.mlp.up_proj.weight")
    assert one_line(error) == (
        "GGUF tensor 'blk.0.ffn_up.weight' has type Q8_K, which the gguf package "
        "cannot dequantise"
    )


def test_a_tensor_with_no_counterpart_is_named(tmp_path):
    extra = {"rope_freqs.weight": np.ones(4, dtype=np.float32)}
    write_gguf(tmp_path / "more.gguf", tiny_reference(), tensors=extra)
    with pytest.raises(ValueError) as error:
        nt.from_gguf(tmp_path / "more.gguf")
    assert one_line(error) == "GGUF tensor 'rope_freqs.weight' has no named counterpart"


@pytest.mark.parametrize(
    "qtype, ours", [(Q.Q4_1, dequantize_q4_1), (Q.Q8_0, dequantize_q8_0)]
)
def test_the_block_equations_equal_gguf_dequantisation(qtype, ours):
    """w = d q + m (Q4_1) and w = d q (Q8_0), on weights gguf quantised."""
    rng = np.random.default_rng(0)
    weights = rng.normal(size=(6, 96)).astype(np.float32)
    raw = gguf.quants.quantize(weights, qtype)
    expected = torch.from_numpy(gguf.quants.dequantize(raw, qtype))
    named = ours(torch.from_numpy(raw))
    assert torch.equal(named, expected)
    # and the quantisation error is what 4 or 8 bits per weight allow
    error = (named - torch.from_numpy(weights)).abs().max()
    assert error < (0.25 if qtype == Q.Q4_1 else 0.03)
