"""Interoperability: PyTorch's own modules and Hugging Face checkpoints in and out of
the named ones."""

from named_transformer.interop.pytorch import (
    bias_from_torch,
    from_torch,
    mask_from_torch,
    to_torch,
)

__all__ = ["bias_from_torch", "from_torch", "mask_from_torch", "to_torch"]
