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
``LanguageModel(vocab, TransformerConfig(norm_first=True, activation="gelu_tanh",
positions=Learned(1024)), scale_embeddings=False)``.

Llama (and Qwen2, Mistral, SmolLM2) is this model with rotary positions inside every
self-attention, nothing added to the embeddings and no scale, pre-norm blocks of
RMSNorm and a gated SiLU feed-forward without biases, grouped key/value heads and a
final RMSNorm: ``LanguageModel(vocab, TransformerConfig.llama(...),
scale_embeddings=False, tie_output=...)`` (the Llama configuration's positions are
``Rotary()``).
"""

from __future__ import annotations

from dataclasses import replace

from jaxtyping import Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.masks import causal_mask, sliding_window_mask
from named_transformer.models.config import TransformerConfig
from named_transformer.models.embedding import TokenEmbedding, embed_positions
from named_transformer.models.encoder import Encoder
from named_transformer.models.generator import Generator
from named_transformer.models.parameters import CountsParameters
from named_transformer.models.variants import PositionScheme, position_scheme

__all__ = ["LanguageModel"]


# --8<-- [start:LanguageModel]
class LanguageModel(CountsParameters, nn.Module):
    r"""Token embeddings, ``config.decoder_layers`` causal blocks, a tied generator.

    The positions are the configuration's (``config.positions``): the paper's
    sinusoidal table, a learned one (GPT-2), or a scheme of every block's
    self-attention (``Rotary`` as Llama, ``ALiBi``, ``Relative``), with only dropout
    applied to the embeddings. ``positions``, ``max_positions`` and ``max_distance``
    are a shorthand that sets them: ``positions="learned", max_positions=1024`` is
    ``config.positions = Learned(1024)``. ``max_positions`` is the context the model
    is meant for (:attr:`max_positions`; a learned table's rows).
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
        positions: PositionScheme | str | None = None,
        max_positions: int | None = None,
        tie_output: bool = True,
        output_bias: bool | None = None,
        scale_embeddings: bool = True,
        max_distance: int | None = None,
    ) -> None:
        super().__init__()
        c = TransformerConfig.base() if config is None else config
        if positions is not None or max_positions or max_distance is not None:
            scheme = position_scheme(
                c.positions if positions is None else positions,
                max_positions=max_positions, max_distance=max_distance,
            )  # fmt: skip
            c = replace(c, positions=scheme)
        self.config = c
        # the context: a learned table's rows, else the length the model is meant
        # for (Hugging Face's max_position_embeddings), 1024 unless given
        context = max_positions or 1024
        self.max_positions = getattr(c.positions, "max_positions", context)
        self.embedding = TokenEmbedding(vocab, c.layer, scale=scale_embeddings)
        self.positions = embed_positions(c.positions, c.layer, c.dropout)
        self.blocks = Encoder.of(c, c.decoder_layers, causal=True)
        table = self.embedding.table if tie_output else None
        bias = not tie_output if output_bias is None else output_bias
        self.generator = Generator(c.layer, vocab, table=table, bias=bias)

    # --8<-- [end:LanguageModel]

    # --8<-- [start:forward]
    @checked
    def forward(
        self, tokens: Int[Tensor, "*batch seq"]
    ) -> Float[Tensor, "*batch seq vocab"]:
        """Log-probabilities of the next token at every position (each layer's
        weights are recorded: ``blocks.layers.{}.self_attention.weights``)."""
        return self.generator(self.hidden_states(tokens))

    @checked
    def hidden_states(
        self, tokens: Int[Tensor, "*batch seq"]
    ) -> Float[Tensor, "*batch seq layer"]:
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
        return self.blocks(embedded, mask)

    # --8<-- [end:forward]
