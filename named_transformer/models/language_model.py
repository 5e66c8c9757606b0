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

Llama (and Qwen2, Mistral, SmolLM2) is this model with rotary positions inside every
self-attention, nothing added to the embeddings and no scale, pre-norm blocks of
RMSNorm and a gated SiLU feed-forward without biases, grouped key/value heads and a
final RMSNorm: ``LanguageModel(vocab, TransformerConfig.llama(...),
positions="rotary", scale_embeddings=False, tie_output=...)``.
"""

from __future__ import annotations

from jaxtyping import Float, Int
from torch import Tensor, nn

import named_transformer.models.alibi  # noqa: F401  (registers "alibi")
import named_transformer.models.relative  # noqa: F401  (registers "relative")
import named_transformer.models.rotary  # noqa: F401  (registers "rotary")
from named_transformer.axes import checked
from named_transformer.core.masks import causal_mask, sliding_window_mask
from named_transformer.models.config import TransformerConfig
from named_transformer.models.embedding import (
    LearnedPositions,
    NoPositions,
    SinusoidalPositions,
    TokenEmbedding,
)
from named_transformer.models.encoder import Encoder
from named_transformer.models.generator import Generator
from named_transformer.models.parameters import CountsParameters
from named_transformer.models.variants import POSITION_SCHEMES, SchemeRequest

__all__ = ["LanguageModel"]


# --8<-- [start:LanguageModel]
class LanguageModel(CountsParameters, nn.Module):
    r"""Token embeddings, ``config.decoder_layers`` causal blocks, a tied generator.

    ``positions`` is ``"sinusoidal"`` (the paper), ``"learned"`` (GPT-2; then at most
    ``max_positions`` tokens), or the name of a position scheme of the attention
    (:data:`~named_transformer.models.variants.POSITION_SCHEMES`: ``"rotary"`` with
    base ``config.rotary_base``, as Llama; ``"alibi"``; ``"relative"`` with clipping
    distance ``max_distance``): every block's self-attention is then that scheme's
    module and only dropout is applied to the embeddings
    (:class:`~named_transformer.models.embedding.NoPositions`).
    ``scale_embeddings=False`` drops the $\sqrt{|\mathsf{layer}|}$ factor (GPT-2,
    Llama). ``tie_output=False`` gives the output
    its own table, with a bias unless ``output_bias=False`` (GPT-2's untied head has
    none).
    """

    def __init__(
        self,
        vocab: int,
        config: TransformerConfig | None = None,
        *,
        positions: str = "sinusoidal",
        max_positions: int = 1024,
        tie_output: bool = True,
        output_bias: bool | None = None,
        scale_embeddings: bool = True,
        max_distance: int | None = None,
    ) -> None:
        super().__init__()
        self.config = c = TransformerConfig.base() if config is None else config
        self.max_positions = max_positions
        self.embedding = TokenEmbedding(vocab, c.layer, scale=scale_embeddings)
        if positions == "sinusoidal":
            self.positions = SinusoidalPositions(c.layer, dropout=c.dropout)
        elif positions == "learned":
            self.positions = LearnedPositions(max_positions, c.layer, dropout=c.dropout)
        elif positions in POSITION_SCHEMES:
            self.positions = NoPositions(c.dropout)
        else:
            raise ValueError(
                "positions must be 'sinusoidal', 'learned' or one of "
                f"{sorted(POSITION_SCHEMES)}, got {positions!r}"
            )
        self.blocks = Encoder.build(
            c.decoder_layers, c.layer, c.heads, c.hidden,
            final_norm=c.has_final_norm, **c.layer_options(),
        )  # fmt: skip
        if positions in POSITION_SCHEMES:
            self._use_scheme(positions, max_distance)
        table = self.embedding.table if tie_output else None
        bias = not tie_output if output_bias is None else output_bias
        self.generator = Generator(c.layer, vocab, table=table, bias=bias)

    def _use_scheme(self, name: str, max_distance: int | None) -> None:
        """Every block's self-attention built by the scheme ``name``, with the
        config's options (the model kinds do the same from a spec)."""
        c = self.config
        if name == "relative" and max_distance is None:
            raise ValueError("positions='relative' needs max_distance (k)")
        options = {
            "dropout": c.dropout, "fused": c.fused_attention, "kv_heads": c.kv_heads,
            "bias": c.bias, "qkv_bias": c.qkv_bias, "block": c.attention_block,
        }  # fmt: skip
        request = SchemeRequest(
            c.layer, c.heads, options=options, causal=True,
            max_distance=max_distance, rotary_base=c.rotary_base,
        )  # fmt: skip
        for block in self.blocks.layers:
            block.self_attention = POSITION_SCHEMES[name](request)

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
