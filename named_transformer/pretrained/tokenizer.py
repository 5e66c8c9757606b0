r"""The tokenizer and chat template a GGUF file carries, built with ``tokenizers``.

A GGUF file stores its tokenizer as metadata: the vocabulary
(``tokenizer.ggml.tokens``), the merges of a byte-level BPE (``tokenizer.ggml.merges``,
the scheme of GPT-2 that SmolLM2, Llama 3 and Qwen2 share), which tokens are control
tokens, and the ids of the special ones. :func:`gguf_tokenizer` hands those to the
``tokenizers`` library's own BPE model and byte-level pre-tokenizer (no BPE written
here); the chat template, a Jinja template in ``tokenizer.chat_template``, is
rendered in Jinja's sandbox, since a template read from a file is code.
"""

from __future__ import annotations

from dataclasses import dataclass

from named_transformer.interop.gguf import GGUFCheckpoint

__all__ = ["ChatTokenizer", "gguf_tokenizer"]

_CONTROL = 3  # llama.cpp's token type of a control token (<|im_start|>, ...)
# pre-tokenizers (tokenizer.ggml.pre) that split text with GPT-2's own expression
_GPT2_SPLIT = ("default", "gpt2", "smollm")


# --8<-- [start:ChatTokenizer]
@dataclass(frozen=True)
class ChatTokenizer:
    """Text to token ids and back, and the chat template that wraps a conversation.

    ``tokenizer`` is a ``tokenizers.Tokenizer``; ``end_of_turn`` is the id that ends
    the assistant's answer (llama.cpp's ``eot_token_id``, else ``eos_token_id``).
    """

    tokenizer: object
    template: str | None
    bos: int | None
    eos: int | None
    end_of_turn: int | None
    add_bos: bool

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` (control tokens written in it kept whole), after
        ``bos`` when the file asks for it."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return [self.bos, *ids] if self.add_bos and self.bos is not None else ids

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids`` (control tokens spelled out)."""
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def chat(self, messages: list[dict[str, str]]) -> list[int]:
        """The ids of ``messages`` (``{"role": ..., "content": ...}``) wrapped by the
        chat template, ending where the assistant's answer starts."""
        if self.template is None:
            raise ValueError("the GGUF file has no chat template")
        return self.tokenizer.encode(
            self.render(messages), add_special_tokens=False
        ).ids

    def render(self, messages: list[dict[str, str]]) -> str:
        """The chat template applied to ``messages``, as text."""
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True
        )
        token = self.tokenizer.id_to_token
        return environment.from_string(self.template).render(
            messages=messages, add_generation_prompt=True,
            bos_token=token(self.bos) if self.bos is not None else "",
            eos_token=token(self.eos) if self.eos is not None else "",
        )  # fmt: skip


# --8<-- [end:ChatTokenizer]


def _special(checkpoint: GGUFCheckpoint, name: str) -> int | None:
    value = checkpoint.metadata.get(f"tokenizer.ggml.{name}_token_id")
    return None if value is None else int(value)


# --8<-- [start:gguf_tokenizer]
def gguf_tokenizer(checkpoint: GGUFCheckpoint) -> ChatTokenizer:
    """The byte-level BPE tokenizer and the chat template of a GGUF file.

    A tokenizer of another kind (``tokenizer.ggml.model`` other than ``gpt2``, or a
    pre-tokenizer whose splitting expression is not GPT-2's) raises ValueError
    naming it.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    kind = checkpoint.metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(
            f"GGUF tokenizer.ggml.model={kind!r} is not supported: only 'gpt2' "
            "(byte-level BPE) is"
        )
    split = checkpoint.metadata.get("tokenizer.ggml.pre", "default")
    if split not in _GPT2_SPLIT:
        raise ValueError(
            f"GGUF tokenizer.ggml.pre={split!r} is not supported: "
            f"{', '.join(_GPT2_SPLIT)} are"
        )
    tokens = checkpoint.array("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in checkpoint.array("tokenizer.ggml.merges")]
    vocabulary = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocabulary, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    kinds = checkpoint.array("tokenizer.ggml.token_type")
    control = [t for t, k in zip(tokens, kinds, strict=True) if k == _CONTROL]
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in control]
    )
    eot = _special(checkpoint, "eot")
    return ChatTokenizer(
        tokenizer, checkpoint.metadata.get("tokenizer.chat_template"),
        bos=_special(checkpoint, "bos"), eos=_special(checkpoint, "eos"),
        end_of_turn=eot if eot is not None else _special(checkpoint, "eos"),
        add_bos=bool(checkpoint.metadata.get("tokenizer.ggml.add_bos_token", False)),
    )  # fmt: skip


# --8<-- [end:gguf_tokenizer]
