r"""Counting a model's parameters, each shared (tied) tensor once.

``nn.Module.parameters()`` yields a tensor shared by two submodules once, so tied
embeddings count $|\mathsf{vocab}|\cdot|\mathsf{layer}|$ once, as they are trained once.
"""

from __future__ import annotations

from torch import nn

__all__ = ["CountsParameters"]


# --8<-- [start:CountsParameters]
class CountsParameters:
    """Mixin for ``nn.Module`` subclasses: ``num_parameters()``."""

    def num_parameters(self: nn.Module, trainable_only: bool = False) -> int:
        """The number of scalar parameters (shared tensors counted once)."""
        return sum(
            p.numel()
            for p in self.parameters()
            if p.requires_grad or not trainable_only
        )


# --8<-- [end:CountsParameters]
