"""Interoperability: PyTorch's own modules in and out of the named ones."""

from named_transformer.interop.pytorch import from_torch, mask_from_torch, to_torch

__all__ = ["from_torch", "mask_from_torch", "to_torch"]
