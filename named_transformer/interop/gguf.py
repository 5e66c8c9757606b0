r"""llama.cpp's GGUF files as the library's named modules.

A GGUF file holds a model's configuration as metadata (``llama.block_count``,
``llama.attention.head_count_kv``, ...), its tokenizer (the vocabulary, the merges,
the chat template) and its weights, most of them quantised in blocks
(:mod:`~named_transformer.interop.quantization`). :func:`from_gguf` reads it with the
``gguf`` package (the parser llama.cpp maintains; it runs no code from the file),
writes the metadata as a Hugging Face configuration, dequantises each tensor with
``gguf``'s own code, renames it to its Hugging Face name and converts it with the same
name table as :func:`~named_transformer.interop.huggingface.from_huggingface`.

One layout differs. llama.cpp rotates the channel pairs $(2i, 2i+1)$ of each head,
Hugging Face's Llama (and :func:`~named_transformer.core.rotary.rotate`) the pairs
$(i, i + |\mathsf{key}|/2)$, so llama.cpp's converter interleaves the two halves of
every head's rows of $W^Q$ and $W^K$. Reading the file undoes it:

$$W_{\text{file}}[(\mathsf{heads}, \mathsf{pairs}, \mathsf{two}), \mathsf{layer}]
  \;\longrightarrow\;
  W[(\mathsf{heads}, \mathsf{two}, \mathsf{pairs}), \mathsf{layer}],
  \qquad |\mathsf{two}| = 2,$$

with $\mathsf{kv\_heads}$ in place of $\mathsf{heads}$ for $W^K$. Qwen2's files keep
Hugging Face's layout (llama.cpp rotates Qwen2 by halves), so they are read as they
are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import torch
from einops import rearrange
from torch import Tensor

from named_transformer.interop.huggingface import convert_checkpoint
from named_transformer.models.language_model import LanguageModel

if TYPE_CHECKING:  # numpy comes with gguf (the pretrained extra), not the core install
    import numpy as np

__all__ = ["GGUFCheckpoint", "StoredTensor", "from_gguf", "read_gguf"]

EXTRA = "pip install -e '.[pretrained]' in a clone"
ARCHITECTURES = ("llama", "qwen2")

# llama.cpp's tensor names -> Hugging Face's (the layer number is {i})
_TENSORS = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.ffn_gate.weight": "layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "layers.{i}.mlp.down_proj.weight",
    "blk.{i}.ffn_gate.bias": "layers.{i}.mlp.gate_proj.bias",
    "blk.{i}.ffn_up.bias": "layers.{i}.mlp.up_proj.bias",
    "blk.{i}.ffn_down.bias": "layers.{i}.mlp.down_proj.bias",
    **{
        f"blk.{{i}}.attn_{ours}.{kind}": f"layers.{{i}}.self_attn.{theirs}_proj.{kind}"
        for ours, theirs in (("q", "q"), ("k", "k"), ("v", "v"), ("output", "o"))
        for kind in ("weight", "bias")
    },
}
_LAYER = re.compile(r"^blk\.(\d+)\.")
_ROWS = 4096  # rows dequantised at once


def _hugging_face_name(name: str) -> str:
    """The Hugging Face name of llama.cpp's tensor ``name``, or a ValueError."""
    layer = _LAYER.match(name)
    pattern = _LAYER.sub("blk.{i}.", name) if layer else name
    if pattern not in _TENSORS:
        raise ValueError(f"GGUF tensor {name!r} has no named counterpart")
    return _TENSORS[pattern].format(i=layer[1] if layer else "")


class StoredTensor(NamedTuple):
    """Where and how a GGUF file stores one tensor (the file's own name, ggml's
    type number, the shape rows first, its bytes and their offset in the file)."""

    name: str
    kind: int
    shape: tuple[int, ...]
    size: int
    offset: int


@dataclass(frozen=True)
class GGUFCheckpoint:
    """A GGUF file read: its metadata, its Hugging Face configuration and where its
    tensors lie (still quantised; :meth:`tensor` reads and dequantises one).

    Reading keeps no parser: ``gguf``'s reader holds every metadata entry as small
    arrays (160 MB for SmolLM2's vocabulary), so its values are copied out as Python
    values and the reader dropped before any weight is read.
    """

    path: Path
    metadata: Mapping[str, object]  # every field; arrays (the vocabulary) as lists
    config: Mapping[str, object]  # Hugging Face's names: model_type, hidden_size, ...
    tensors: Mapping[str, StoredTensor]  # by Hugging Face name

    def array(self, key: str) -> list:
        """The metadata array ``key`` (``tokenizer.ggml.tokens``, ...) as a list."""
        if key not in self.metadata:
            raise ValueError(f"GGUF metadata has no {key!r}")
        return list(self.metadata[key])

    def stored_bytes(self, name: str) -> np.ndarray:
        """The bytes of tensor ``name`` as stored, one row of the matrix per row.

        A plain file read, not a memory map: a map's pages would stay resident
        beside the model (98 MB for SmolLM2)."""
        import numpy as np  # with gguf, in the pretrained extra

        stored = self.tensors[name]
        raw = np.fromfile(
            self.path, dtype=np.uint8, count=stored.size, offset=stored.offset
        )
        return raw.reshape(math.prod(stored.shape[:-1]), -1)  # allow-raw: rows

    def tensor(self, name: str) -> Tensor:
        """The tensor of Hugging Face name ``name``, dequantised to float32 by
        ``gguf``, in Hugging Face's layout (rotary rows un-interleaved)."""
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        stored = self.tensors[name]
        kind = GGMLQuantizationType(stored.kind)
        tensor = torch.empty(stored.shape)
        rows = tensor.reshape(-1, stored.shape[-1])  # allow-raw: filled row by row
        raw = self.stored_bytes(name)
        # a few rows at a time, so dequantising never holds a second full copy
        for start in range(0, rows.shape[0], _ROWS):
            try:
                values = dequantize(raw[start : start + _ROWS], kind)
            except NotImplementedError:
                raise ValueError(
                    f"GGUF tensor {stored.name!r} has type {kind.name}, which the "
                    "gguf package cannot dequantise"
                ) from None
            rows[start : start + _ROWS] = torch.from_numpy(values)
        heads = self._interleaved_heads(name)
        if heads is not None:
            tensor = rearrange(
                tensor, "(heads pairs two) ... -> (heads two pairs) ...",
                heads=heads, two=2,
            )  # fmt: skip
        return tensor

    def _interleaved_heads(self, name: str) -> int | None:
        """The heads whose rows llama.cpp interleaved in tensor ``name``, if any."""
        if self.config["model_type"] != "llama":
            return None
        if name.endswith("q_proj.weight") or name.endswith("q_proj.bias"):
            return int(self.config["num_attention_heads"])
        if name.endswith("k_proj.weight") or name.endswith("k_proj.bias"):
            return int(self.config["num_key_value_heads"])
        return None


def _field(metadata: Mapping, key: str, default=None, *, required: bool = False):
    if key not in metadata:
        if required:
            raise ValueError(f"GGUF metadata has no {key!r}")
        return default
    return metadata[key]


def _config(metadata: Mapping, tensors: Mapping[str, object]) -> dict:
    """Hugging Face's configuration of a llama or qwen2 GGUF file."""
    arch = _field(metadata, "general.architecture", required=True)
    if arch not in ARCHITECTURES:
        raise ValueError(
            f"GGUF architecture {arch!r} is not supported: "
            f"{', '.join(ARCHITECTURES)} are"
        )

    def field(key, default=None, *, required=False):
        return _field(metadata, f"{arch}.{key}", default, required=required)

    layer = int(field("embedding_length", required=True))
    heads = int(field("attention.head_count", required=True))
    head_dim = int(field("attention.key_length", layer // heads))
    rotary = int(field("rope.dimension_count", head_dim))
    scaling = field("rope.scaling.type", "none")
    if scaling not in ("none", None):
        raise ValueError(
            f"GGUF metadata {arch}.rope.scaling.type={scaling!r} is not supported: "
            "the named rotary positions are unscaled"
        )
    embeddings = tensors.get("embed_tokens.weight")
    return {
        "model_type": arch,
        "num_hidden_layers": int(field("block_count", required=True)),
        "hidden_size": layer,
        "intermediate_size": int(field("feed_forward_length", required=True)),
        "num_attention_heads": heads,
        "num_key_value_heads": int(field("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "partial_rotary_factor": rotary / head_dim,
        "rope_theta": float(field("rope.freq_base", 10000.0)),
        "rms_norm_eps": float(field("attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": int(field("context_length", 2048)),
        "vocab_size": int(field("vocab_size", embeddings and embeddings.shape[0])),
        "tie_word_embeddings": "lm_head.weight" not in tensors,
        "hidden_act": "silu",
    }


def _reader(path: Path):
    """gguf's reader of ``path``, or a ValueError saying why the file is not one."""
    try:
        from gguf import GGUFReader
    except ModuleNotFoundError:
        raise ModuleNotFoundError(f"reading GGUF files needs gguf: {EXTRA}") from None
    if not path.is_file():
        raise ValueError(f"no GGUF file at {str(path)!r}")
    with path.open("rb") as file:
        magic = file.read(4)
    if magic != b"GGUF":
        raise ValueError(
            f"{str(path)!r} is not a GGUF file: it starts with {magic!r}, not b'GGUF'"
        )
    try:
        return GGUFReader(path)
    except Exception as error:  # the parser's own error, whatever the damage
        raise ValueError(
            f"{str(path)!r} is not a readable GGUF file (truncated or damaged: "
            f"{type(error).__name__}: {error})"
        ) from None


def _metadata(reader) -> dict:
    """Every metadata field as a Python value (strings decoded, arrays as lists)."""
    return {
        key: field.contents()
        for key, field in reader.fields.items()
        if not key.startswith("GGUF.")
    }


def _stored(tensor) -> StoredTensor:
    """What :meth:`GGUFCheckpoint.tensor` needs of gguf's ``ReaderTensor``: ggml
    lists the shape fastest axis first, so the rows come last there."""
    shape = tuple(int(size) for size in reversed(tensor.shape))
    return StoredTensor(
        tensor.name, int(tensor.tensor_type), shape, int(tensor.n_bytes),
        int(tensor.data_offset),
    )  # fmt: skip


def read_gguf(path: str | Path) -> GGUFCheckpoint:
    """Open a GGUF file: its metadata, configuration and (lazy) tensors.

    A missing file, one that is not GGUF, a truncated one, an architecture other than
    ``llama`` or ``qwen2``, or a tensor with no named counterpart raises ValueError in
    one line naming the problem.
    """
    path = Path(path)
    reader = _reader(path)
    metadata = _metadata(reader)
    tensors = {_hugging_face_name(t.name): _stored(t) for t in reader.tensors}
    del reader  # its parsed fields are large; everything needed is copied out
    return GGUFCheckpoint(path, metadata, _config(metadata, tensors), tensors)


# --8<-- [start:from_gguf]
def from_gguf(
    path: str | Path | GGUFCheckpoint, *, fused_attention: bool = False
) -> LanguageModel:
    """A llama.cpp GGUF file (architecture ``llama`` or ``qwen2``) as a
    :class:`~named_transformer.models.language_model.LanguageModel` in float32.

    The metadata becomes a Hugging Face configuration, and each tensor is
    dequantised by ``gguf``, un-interleaved (llama's $W^Q$, $W^K$) and copied into
    the named weights before the next is read (benchmark table 18 measures the
    peak memory of loading against one float32 copy of the model). Bad files raise
    ValueError in one line (:func:`read_gguf`; ``path`` may be its result); so does
    a configuration the named code does not implement.
    """
    checkpoint = path if isinstance(path, GGUFCheckpoint) else read_gguf(path)
    return convert_checkpoint(
        checkpoint.config, set(checkpoint.tensors), checkpoint.tensor,
        dtype=torch.float32, fused_attention=fused_attention, empty=True,
    )  # fmt: skip


# --8<-- [end:from_gguf]
