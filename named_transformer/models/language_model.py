r"""A decoder-only language model (paper A.1; GPT): predict each token from the ones
before.

$$\begin{aligned}
  X^0 &= E_{\text{tokens}}\sqrt{|\mathsf{layer}|} + P, \qquad
  X^{l} = \text{Block}(X^{l-1}, M_{\text{causal}}), \\
  \log p(\text{token}_{j+1} \mid \text{tokens}_{\le j})
  &= \nfun{vocab}{log\,softmax}(E \ndot{layer} X^L)_j.
\end{aligned}$$

With no encoder there is nothing to cross-attend, so a block is an encoder layer
(self-attention, feed-forward) under the causal mask. The output reuses the embedding
table $E$ (tied embeddings).

GPT-2 is this model with learned positions, no $\sqrt{|\mathsf{layer}|}$ scale,
pre-norm blocks with a final LayerNorm and the tanh GELU:
``LanguageModel(vocab, TransformerConfig(norm_first=True, activation="gelu_tanh"),
positions="learned", scale_embeddings=False)``.
"""

from __future__ import annotations

from typing import Literal

from jaxtyping import Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.masks import causal_mask, sliding_window_mask
from named_transformer.models.config import TransformerConfig
from named_transformer.models.embedding import (
    LearnedPositions,
    SinusoidalPositions,
    TokenEmbedding,
)
from named_transformer.models.encoder import Encoder
from named_transformer.models.generator import Generator
from named_transformer.models.parameters import CountsParameters

__all__ = ["LanguageModel"]


# --8<-- [start:LanguageModel]
class LanguageModel(CountsParameters, nn.Module):
    r"""Token embeddings, ``config.decoder_layers`` causal blocks, a tied generator.

    ``positions`` is ``"sinusoidal"`` (the paper) or ``"learned"`` (GPT-2; then at most
    ``max_positions`` tokens). ``scale_embeddings=False`` drops the
    $\sqrt{|\mathsf{layer}|}$ factor (GPT-2). ``tie_output=False`` gives the output
    its own table, with a bias unless ``output_bias=False`` (GPT-2's untied head has
    none).
    """

    def __init__(
        self,
        vocab: int,
        config: TransformerConfig | None = None,
        *,
        positions: Literal["sinusoidal", "learned"] = "sinusoidal",
        max_positions: int = 1024,
        tie_output: bool = True,
        output_bias: bool | None = None,
        scale_embeddings: bool = True,
    ) -> None:
        super().__init__()
        self.config = c = TransformerConfig.base() if config is None else config
        self.embedding = TokenEmbedding(vocab, c.layer, scale=scale_embeddings)
        if positions == "sinusoidal":
            self.positions = SinusoidalPositions(c.layer, dropout=c.dropout)
        elif positions == "learned":
            self.positions = LearnedPositions(max_positions, c.layer, dropout=c.dropout)
        else:
            raise ValueError(
                f"positions must be 'sinusoidal' or 'learned', got {positions!r}"
            )
        self.blocks = Encoder.build(
            c.decoder_layers, c.layer, c.heads, c.hidden,
            final_norm=c.has_final_norm, **c.layer_options(),
        )  # fmt: skip
        table = self.embedding.table if tie_output else None
        bias = not tie_output if output_bias is None else output_bias
        self.generator = Generator(c.layer, vocab, table=table, bias=bias)

    @checked
    def forward(
        self, tokens: Int[Tensor, "*batch seq"], need_weights: bool = False
    ) -> (
        Float[Tensor, "*batch seq vocab"]
        | tuple[
            Float[Tensor, "*batch seq vocab"],
            list[Float[Tensor, "*batch heads seq seq"]],
        ]
    ):
        """Log-probabilities of the next token at every position (and per-layer
        weights)."""
        if need_weights:
            hidden, weights = self.hidden_states(tokens, need_weights=True)
            return self.generator(hidden), weights
        return self.generator(self.hidden_states(tokens))

    @checked
    def hidden_states(
        self, tokens: Int[Tensor, "*batch seq"], need_weights: bool = False
    ) -> (
        Float[Tensor, "*batch seq layer"]
        | tuple[
            Float[Tensor, "*batch seq layer"],
            list[Float[Tensor, "*batch heads seq seq"]],
        ]
    ):
        """$X^L$, the last block's output (after the final LayerNorm, if any).

        The blocks attend under the causal mask, or the sliding window of
        ``config.window`` positions when it is set.
        """
        seq, window = tokens.shape[-1], self.config.window
        mask = (
            causal_mask(seq, device=tokens.device)
            if window is None
            else sliding_window_mask(seq, window=window, device=tokens.device)
        )
        embedded = self.positions(self.embedding(tokens))
        return self.blocks(embedded, mask, need_weights)


# --8<-- [end:LanguageModel]
