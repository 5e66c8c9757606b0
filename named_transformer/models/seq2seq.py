r"""Sequence to sequence with and without attention (Bahdanau, Cho & Bengio, 2015;
Chai; dataflowr).

An RNN encoder–decoder reads the source $x_1, \dots, x_T$ and writes the target
$y_1, \dots, y_{T'}$. The basic one (Cho et al., 2014; Sutskever et al., 2014) squeezes
the whole source into **one fixed-length vector** $c$, the encoder's last state, and
Chai names the drawback: "the performance of basic encoder–decoder drops rapidly as
the length of an input sentence increases". Bahdanau et al. keep one *annotation* per
source position and let the decoder look back at all of them at every step:

$$h_i = [\overrightarrow{h}_i ; \overleftarrow{h}_i]
  \in \mathbb R^{\mathsf{annotation}},\qquad
  \alpha_{j\cdot} = \nfun{seq}{softmax}\; a(s_{j-1}, h),\qquad
  c_j = \alpha_{j\cdot} \ndot{seq} h,$$

$$s_j = f(s_{j-1}, y_{j-1}, c_j),\qquad p(y_j \mid y_{<j}, x) = g(y_{j-1}, s_j, c_j),$$

the output step (the query) at $j$ and the source position (the key) at $i$, as
everywhere in the library (Bahdanau et al. swap the two letters), with $f$ a GRU
(:func:`named_transformer.models.rnn.gru_cell`) and $a$ the additive score of the zoo,
$a(s, h) = w \ndot{hidden} \tanh(W_1 \ndot{key'} s + W_2 \ndot{annotation} h)$, the
state's axis renamed $\mathsf{key'}$ so that $\mathsf{hidden}$ is the score's own width
(:func:`named_transformer.core.scores.additive_score`). Luong's dot, general and concat
scores are selectable; "concat" $w^\top \tanh(W[s; h])$ *is* the additive score with
$W = [W_1\ W_2]$. Everything is batched: padded source positions get annotation 0 and
attention weight exactly 0, and the backward direction starts at each sequence's last
real token.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from einops import pack, rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.core.attention import attend
from named_transformer.core.masks import padding_mask
from named_transformer.core.scores import additive_score, dot_score, general_score
from named_transformer.core.softmax import softmax
from named_transformer.models.rnn import GRUCell, _check_positive, _uniform
from named_transformer.recording import scope, tap

__all__ = [
    "SCORES",
    "AttentionDecoder",
    "BahdanauSeq2Seq",
    "BidirectionalEncoder",
    "RNNEncoderDecoder",
    "FixedContextDecoder",
    "SpecialTokens",
    "bahdanau_attention",
    "bidirectional_annotations",
    "readout",
    "recurrence",
    "reverse_padded",
]

SCORES = ("additive", "dot", "general", "concat")


# --8<-- [start:recurrence]
@checked
def recurrence(
    inputs: Float[Tensor, "*batch seq input"],
    mask: Bool[Tensor, "*batch seq"],
    initial: Float[Tensor, "*batch hidden"],
    cell: Callable[[Tensor, Tensor], Tensor],
    reverse: bool = False,
) -> tuple[Float[Tensor, "*batch seq hidden"], Float[Tensor, "*batch hidden"]]:
    r"""Run a cell along $\mathsf{seq}$: $h_t = f(x_t, h_{t-1})$ where ``mask`` is
    True, else $h_t = h_{t-1}$.

    Padding sits at the end of each row, so a state freezes after the last real token
    (the forward direction) or stays at ``initial`` until it reaches the last real token
    (``reverse=True``): either way each sequence is read exactly as if it were unpadded.
    Returns every state (0 at padded positions) and the final one.
    """
    steps = list(rearrange(inputs, "... seq input -> seq ... input"))
    keep = list(rearrange(mask, "... seq -> seq ... 1"))
    order = range(len(steps) - 1, -1, -1) if reverse else range(len(steps))
    state, states = initial, [initial] * len(steps)
    for t in order:
        state = torch.where(keep[t], cell(steps[t], state), state)
        states[t] = state * keep[t]
    return rearrange(states, "seq ... hidden -> ... seq hidden"), state


# --8<-- [end:recurrence]


# --8<-- [start:bidirectional_annotations]
@checked
def bidirectional_annotations(
    forward_states: Float[Tensor, "*batch seq hidden"],
    backward_states: Float[Tensor, "*batch seq hidden"],
) -> Float[Tensor, "*batch seq annotation"]:
    r"""$h_i = [\overrightarrow{h}_i ; \overleftarrow{h}_i]$:
    $|\mathsf{annotation}| = 2|\mathsf{hidden}|$."""
    return rearrange(
        [forward_states, backward_states],
        "direction ... seq hidden -> ... seq (direction hidden)",
    )


# --8<-- [end:bidirectional_annotations]


# --8<-- [start:reverse_padded]
@checked
def reverse_padded(
    tokens: Int[Tensor, "*batch seq"], lengths: Int[Tensor, "*batch"]
) -> Int[Tensor, "*batch seq"]:
    r"""Sutskever et al.'s trick: reverse each source's real tokens, leave the padding
    at the end."""
    positions = torch.arange(tokens.shape[-1], device=tokens.device)
    lengths = rearrange(lengths, "... -> ... 1")
    index = torch.where(positions < lengths, lengths - 1 - positions, positions)
    return torch.gather(tokens, -1, index)  # allow-raw: gather along seq by position


# --8<-- [end:reverse_padded]


# --8<-- [start:bahdanau_attention]
@checked
def bahdanau_attention(
    previous_state: Float[Tensor, "*batch hidden"],
    annotations: Float[Tensor, "*batch seq annotation"],
    mask: Bool[Tensor, "*batch seq"],
    score: Callable[[Tensor, Tensor], Tensor],
) -> tuple[Float[Tensor, "*batch annotation"], Float[Tensor, "*batch seq"]]:
    r"""One decoder step's context: $\alpha_j = \nfun{seq}{softmax}\, a(s_{j-1}, h)$,
    $c_j = \alpha_j \ndot{seq} h$.

    ``score`` is any function of the zoo with its weights bound; the decoder state is
    the single query (a size-1 $\mathsf{seq'}$ axis). Returns $(c_j, \alpha_j)$.
    """
    query = rearrange(previous_state, "... hidden -> ... 1 hidden")
    weights = softmax(
        score(query, annotations), rearrange(mask, "... seq -> ... 1 seq")
    )
    alignment = tap("alignment", rearrange(weights, "... 1 seq -> ... seq"),
                    "*batch seq")  # fmt: skip
    context = attend(rearrange(alignment, "... seq -> ... 1 seq"), annotations)
    context = rearrange(context, "... 1 annotation -> ... annotation")
    return tap("context", context, "*batch annotation"), alignment


# --8<-- [end:bahdanau_attention]


# --8<-- [start:readout]
@checked
def readout(
    state: Float[Tensor, "*batch hidden"],
    context: Float[Tensor, "*batch annotation"],
    embedded: Float[Tensor, "*batch layer"],
    w_state: Float[Tensor, "vocab hidden"],
    w_context: Float[Tensor, "vocab annotation"],
    w_embedded: Float[Tensor, "vocab layer"],
    bias: Float[Tensor, " vocab"],
) -> Float[Tensor, "*batch vocab"]:
    r"""The logits $g(y_{j-1}, s_j, c_j)$.

    $$g(y_{j-1}, s_j, c_j) = W_s \ndot{hidden} s_j + W_c \ndot{annotation} c_j
      + W_e \ndot{layer} E y_{j-1} + b$$

    One linear map of the concatenation $[s_j; c_j; E y_{j-1}]$, written as three
    contractions so that no axis has to be glued. (Bahdanau et al. add a maxout layer;
    we keep the readout linear.)
    """
    return (
        einsum(w_state, state, "vocab hidden, ... hidden -> ... vocab")
        + einsum(w_context, context, "vocab annotation, ... annotation -> ... vocab")
        + einsum(w_embedded, embedded, "vocab layer, ... layer -> ... vocab")
        + bias
    )


# --8<-- [end:readout]


# --8<-- [start:BidirectionalEncoder]
class BidirectionalEncoder(nn.Module):
    r"""Embed the source, run a forward and a backward GRU, concatenate:
    $h_i = [\overrightarrow{h}_i ; \overleftarrow{h}_i]$.

    Also returns $\overleftarrow{h}_1$, the backward state at the first position, from
    which Bahdanau et al. initialise the decoder:
    $s_0 = \tanh(W_s \overleftarrow{h}_1)$.
    """

    def __init__(self, vocab: int, layer: int, hidden: int) -> None:
        super().__init__()
        _check_positive(vocab=vocab, layer=layer, hidden=hidden)
        self.embedding = nn.Parameter(torch.randn(vocab, layer) * 0.1)
        self.forward_cell = GRUCell(layer, hidden)
        self.backward_cell = GRUCell(layer, hidden)
        self.hidden = hidden

    @checked
    def forward(
        self, tokens: Int[Tensor, "*batch seq"], lengths: Int[Tensor, "*batch"]
    ) -> tuple[Float[Tensor, "*batch seq annotation"], Float[Tensor, "*batch hidden"]]:
        inputs = self.embedding[tokens]
        mask = padding_mask(lengths, tokens.shape[-1])
        initial = inputs.new_zeros(*tokens.shape[:-1], self.hidden)
        forward_states, _ = recurrence(inputs, mask, initial, self.forward_cell)
        backward_states, backward_first = recurrence(
            inputs, mask, initial, self.backward_cell, reverse=True
        )
        annotations = bidirectional_annotations(forward_states, backward_states)
        return tap("annotations", annotations, "*batch seq annotation"), backward_first


# --8<-- [end:BidirectionalEncoder]


class _Decoder(nn.Module):
    """The loop shared by both decoders: teacher forcing, greedy decoding, readout."""

    def __init__(
        self, vocab: int, layer: int, hidden: int, context: int, memory: int
    ) -> None:
        super().__init__()
        _check_positive(
            vocab=vocab, layer=layer, hidden=hidden, context=context, memory=memory
        )
        self.embedding = nn.Parameter(torch.randn(vocab, layer) * 0.1)
        self.cell = GRUCell(layer + context, hidden)
        self.w_initial = _uniform(memory, hidden, memory)
        self.b_initial = _uniform(memory, hidden)
        self.w_state = _uniform(hidden + context + layer, vocab, hidden)
        self.w_context = _uniform(hidden + context + layer, vocab, context)
        self.w_embedded = _uniform(hidden + context + layer, vocab, layer)
        self.b_out = _uniform(hidden + context + layer, vocab)

    def _context(self, state, annotations, mask):  # pragma: no cover - overridden
        raise NotImplementedError

    def _step(self, previous_tokens, state, annotations, mask):
        embedded = self.embedding[previous_tokens]
        context, weights = self._context(state, annotations, mask)
        inputs, _ = pack([embedded, context], "batch *")
        state = tap("state", self.cell(inputs, state), "*batch hidden")
        logits = readout(
            state,
            context,
            embedded,
            self.w_state,
            self.w_context,
            self.w_embedded,
            self.b_out,
        )
        return tap("logits", logits, "*batch vocab"), state, weights

    def run(
        self, summary, annotations, mask, targets, bos, teacher_forcing, steps, eos
    ):
        """Decode ``steps`` tokens; feed the truth with probability
        ``teacher_forcing``."""
        state = torch.tanh(
            einsum(
                self.w_initial, summary, "hidden memory, batch memory -> batch hidden"
            )
            + self.b_initial
        )
        previous = torch.full_like(summary[:, 0], bos, dtype=torch.long)
        all_logits, all_weights = [], []
        finished = torch.zeros_like(previous, dtype=torch.bool)
        for i in range(steps):
            with scope(f"steps.{i}"):  # the taps of step i: decoder.steps.i.alignment
                logits, state, weights = self._step(previous, state, annotations, mask)
            all_logits.append(logits)
            all_weights.append(weights)
            predicted = logits.argmax(-1)  # allow-raw: greedy choice over vocab
            if targets is not None and teacher_forcing >= 1.0:
                previous = targets[:, i]
            elif targets is not None and teacher_forcing > 0.0:
                use_truth = (
                    torch.rand(previous.shape, device=previous.device) < teacher_forcing
                )
                previous = torch.where(use_truth, targets[:, i], predicted)
            else:
                previous = predicted
            if targets is None and eos is not None:
                finished = finished | (predicted == eos)
                if bool(finished.all()):
                    break
        return (
            rearrange(all_logits, "seq_q batch vocab -> batch seq_q vocab"),
            rearrange(all_weights, "seq_q batch seq -> batch seq_q seq"),
        )


# --8<-- [start:AttentionDecoder]
class AttentionDecoder(_Decoder):
    r"""$s_j = \mathrm{GRU}([E y_{j-1}; c_j], s_{j-1})$ with $c_j$ from
    :func:`bahdanau_attention`.

    ``score`` picks the alignment model $a$: ``"additive"`` (Bahdanau, the default),
    or Luong's ``"dot"`` (needs $|\mathsf{hidden}| = |\mathsf{annotation}|$),
    ``"general"`` and ``"concat"`` (the additive score again). ``attention`` is the
    width of the additive score's $\tanh$ layer.
    """

    def __init__(
        self,
        vocab: int,
        layer: int,
        hidden: int,
        annotation: int,
        memory: int,
        score: str = "additive",
        attention: int | None = None,
    ) -> None:
        super().__init__(vocab, layer, hidden, annotation, memory)
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        if score == "dot" and hidden != annotation:
            raise ValueError(
                "the dot score needs hidden == annotation, "
                f"got {hidden} and {annotation}"
            )
        self.score = score
        width = hidden if attention is None else attention
        if score in ("additive", "concat"):
            self.w_query = _uniform(hidden, width, hidden)
            self.w_key = _uniform(annotation, width, annotation)
            self.w_score = _uniform(width, width)
        elif score == "general":
            self.w_general = _uniform(hidden, hidden, annotation)

    def score_function(self) -> Callable[[Tensor, Tensor], Tensor]:
        """The alignment model $a$ with this decoder's weights bound."""
        if self.score in ("additive", "concat"):
            return functools.partial(
                additive_score,
                w_query=self.w_query,
                w_key=self.w_key,
                w_score=self.w_score,
            )
        if self.score == "general":
            return functools.partial(general_score, weight=self.w_general)
        return dot_score

    def _context(self, state, annotations, mask):
        return bahdanau_attention(state, annotations, mask, self.score_function())

    @checked
    def forward(
        self,
        annotations: Float[Tensor, "batch seq annotation"],
        mask: Bool[Tensor, "batch seq"],
        summary: Float[Tensor, "batch memory"],
        targets: Int[Tensor, "batch seq_q"] | None,
        bos: int,
        teacher_forcing: float = 1.0,
        steps: int | None = None,
        eos: int | None = None,
    ) -> tuple[Float[Tensor, "batch seq_q vocab"], Float[Tensor, "batch seq_q seq"]]:
        """Logits for each target position and the alignment matrix $\\alpha$."""
        steps = targets.shape[-1] if steps is None else steps
        return self.run(
            summary, annotations, mask, targets, bos, teacher_forcing, steps, eos
        )


# --8<-- [end:AttentionDecoder]


# --8<-- [start:FixedContextDecoder]
class FixedContextDecoder(_Decoder):
    r"""The basic decoder (Cho et al., 2014): every step sees the same $c$, the
    encoder's last state.

    $s_0 = \tanh(W_0 c + b_0)$, $s_j = \mathrm{GRU}([E y_{j-1}; c], s_{j-1})$,
    $p(y_j) = g(y_{j-1}, s_j, c)$. It is the attention decoder with a single annotation
    $c$: the "alignment" is 1 on it at every step.
    """

    def __init__(self, vocab: int, layer: int, hidden: int, memory: int) -> None:
        super().__init__(vocab, layer, hidden, memory, memory)

    def _context(self, state, annotations, mask):
        context = rearrange(annotations, "batch 1 annotation -> batch annotation")
        return context, torch.ones_like(context[:, :1])

    @checked
    def forward(
        self,
        summary: Float[Tensor, "batch memory"],
        targets: Int[Tensor, "batch seq_q"] | None,
        bos: int,
        teacher_forcing: float = 1.0,
        steps: int | None = None,
        eos: int | None = None,
    ) -> Float[Tensor, "batch seq_q vocab"]:
        steps = targets.shape[-1] if steps is None else steps
        annotations = rearrange(summary, "batch memory -> batch 1 memory")
        mask = torch.ones_like(annotations[:, :, 0], dtype=torch.bool)
        logits, _ = self.run(
            summary, annotations, mask, targets, bos, teacher_forcing, steps, eos
        )
        return logits


# --8<-- [end:FixedContextDecoder]


def _truncate_after_eos(tokens: Tensor, eos: int | None, pad: int) -> Tensor:
    if eos is None:
        return tokens
    seen = torch.cumsum(  # allow-raw: running count of eos along seq_q
        tokens == eos, -1
    )
    after = (seen - (tokens == eos).long()) > 0
    return tokens.masked_fill(after, pad)


@dataclass(frozen=True)
class SpecialTokens:
    """The ids of the tokens a sequence-to-sequence model treats apart: ``bos`` starts
    every target, ``eos`` ends one (greedy decoding stops there; an id outside the
    vocabulary, e.g. -1, never stops it), ``pad`` fills a row after its ``eos``."""

    bos: int = 1
    eos: int = 2
    pad: int = 0

    def __post_init__(self) -> None:
        if len({self.bos, self.eos, self.pad}) < 3:
            raise ValueError(
                f"SpecialTokens must be three different ids, got bos={self.bos}, "
                f"eos={self.eos}, pad={self.pad}"
            )


def _special_tokens(special: SpecialTokens | None, token_ids: dict) -> SpecialTokens:
    """``special`` (default ``SpecialTokens()``) with the ids named in ``token_ids``
    (``eos=-1``) replaced."""
    unknown = sorted(set(token_ids) - {"bos", "eos", "pad"})
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r} (the special "
                        "tokens are bos, eos and pad)")  # fmt: skip
    return replace(special or SpecialTokens(), **token_ids)


class _Seq2Seq(nn.Module):
    """What both RNN encoder–decoders share: the special tokens and the last step of
    greedy decoding."""

    def __init__(self, special: SpecialTokens | None, token_ids: dict) -> None:
        super().__init__()
        special = _special_tokens(special, token_ids)
        self.bos, self.eos, self.pad = special.bos, special.eos, special.pad

    def _greedy_tokens(self, logits: Tensor) -> Tensor:
        """The most likely token at each step, ``pad`` after the first ``eos``."""
        tokens = logits.argmax(-1)  # allow-raw: greedy choice over vocab
        return _truncate_after_eos(tokens, self.eos, self.pad)


# --8<-- [start:BahdanauSeq2Seq]
class BahdanauSeq2Seq(_Seq2Seq):
    r"""Bidirectional GRU encoder + attention decoder (Bahdanau et al., 2015).

    ``forward`` (teacher forcing with probability ``teacher_forcing``) returns the
    logits and the alignment matrix
    $\alpha \in \mathbb R^{\mathsf{seq'}\times\mathsf{seq}}$; :meth:`greedy_decode`
    feeds back its own argmax until every row has produced ``eos``. The sizes and the
    ``score`` are those of :class:`BidirectionalEncoder` and
    :class:`AttentionDecoder`; ``special`` (:class:`SpecialTokens`) holds the ids of
    ``bos``, ``eos`` and ``pad``, which may also be given one by one (``eos=-1``).
    """

    def __init__(
        self,
        vocab: int,
        layer: int = 32,
        hidden: int = 64,
        decoder_hidden: int | None = None,
        score: str = "additive",
        attention: int | None = None,
        special: SpecialTokens | None = None,
        **token_ids: int,
    ) -> None:
        super().__init__(special, token_ids)
        decoder_hidden = hidden if decoder_hidden is None else decoder_hidden
        self.encoder = BidirectionalEncoder(vocab, layer, hidden)
        self.decoder = AttentionDecoder(
            vocab, layer, decoder_hidden, 2 * hidden, hidden, score, attention
        )

    @checked
    def forward(
        self,
        sources: Int[Tensor, "batch seq"],
        lengths: Int[Tensor, " batch"],
        targets: Int[Tensor, "batch seq_q"],
        teacher_forcing: float = 1.0,
    ) -> tuple[Float[Tensor, "batch seq_q vocab"], Float[Tensor, "batch seq_q seq"]]:
        annotations, backward_first = self.encoder(sources, lengths)
        mask = padding_mask(lengths, sources.shape[-1])
        return self.decoder(
            annotations, mask, backward_first, targets, self.bos, teacher_forcing
        )

    @checked
    def greedy_decode(
        self,
        sources: Int[Tensor, "batch seq"],
        lengths: Int[Tensor, " batch"],
        max_steps: int,
    ) -> tuple[Int[Tensor, "batch seq_q"], Float[Tensor, "batch seq_q seq"]]:
        """Greedy decoding: tokens (``pad`` after the first ``eos``) and the
        alignments."""
        annotations, backward_first = self.encoder(sources, lengths)
        mask = padding_mask(lengths, sources.shape[-1])
        logits, weights = self.decoder(
            annotations, mask, backward_first, None, self.bos, 0.0, max_steps, self.eos
        )
        return self._greedy_tokens(logits), weights


# --8<-- [end:BahdanauSeq2Seq]


# --8<-- [start:RNNEncoderDecoder]
class RNNEncoderDecoder(_Seq2Seq):
    r"""The basic encoder–decoder: a GRU reads the source into one vector $c$, its
    last state.

    With ``reverse_source=True`` the source is read backwards (Sutskever et al., 2014,
    Chai), so the first source tokens are the last ones read, close to the first
    ones written. No attention: ``forward`` returns logits only. ``special`` and
    ``token_ids``: as for :class:`BahdanauSeq2Seq`.
    """

    def __init__(
        self,
        vocab: int,
        layer: int = 32,
        hidden: int = 64,
        decoder_hidden: int | None = None,
        reverse_source: bool = False,
        special: SpecialTokens | None = None,
        **token_ids: int,
    ) -> None:
        super().__init__(special, token_ids)
        _check_positive(vocab=vocab, layer=layer, hidden=hidden)
        decoder_hidden = hidden if decoder_hidden is None else decoder_hidden
        self.embedding = nn.Parameter(torch.randn(vocab, layer) * 0.1)
        self.encoder_cell = GRUCell(layer, hidden)
        self.decoder = FixedContextDecoder(vocab, layer, decoder_hidden, hidden)
        self.reverse_source, self.hidden = reverse_source, hidden

    @checked
    def encode(
        self, sources: Int[Tensor, "batch seq"], lengths: Int[Tensor, " batch"]
    ) -> Float[Tensor, "batch hidden"]:
        """$c$: the last state at each sequence's last real token."""
        if self.reverse_source:
            sources = reverse_padded(sources, lengths)
        inputs = self.embedding[sources]
        initial = inputs.new_zeros(sources.shape[0], self.hidden)
        mask = padding_mask(lengths, sources.shape[-1])
        return recurrence(inputs, mask, initial, self.encoder_cell)[1]

    @checked
    def forward(
        self,
        sources: Int[Tensor, "batch seq"],
        lengths: Int[Tensor, " batch"],
        targets: Int[Tensor, "batch seq_q"],
        teacher_forcing: float = 1.0,
    ) -> Float[Tensor, "batch seq_q vocab"]:
        return self.decoder(
            self.encode(sources, lengths), targets, self.bos, teacher_forcing
        )

    @checked
    def greedy_decode(
        self,
        sources: Int[Tensor, "batch seq"],
        lengths: Int[Tensor, " batch"],
        max_steps: int,
    ) -> Int[Tensor, "batch seq_q"]:
        logits = self.decoder(
            self.encode(sources, lengths), None, self.bos, 0.0, max_steps, self.eos
        )
        return self._greedy_tokens(logits)


# --8<-- [end:RNNEncoderDecoder]
