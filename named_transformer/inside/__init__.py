"""Look inside a Transformer: record and edit every activation the equations name,
and the analyses built on them (logit lens, direct logit attribution, induction
scores, activation patching)."""

from named_transformer.inside.analyses import (
    direct_logit_attribution,
    head_attribution,
    induction_score,
    induction_scores,
    lens,
    logit_lens,
    previous_token_scores,
    repeated_tokens,
    residual_stream,
)
from named_transformer.inside.patching import patching_grid
from named_transformer.recording import (
    Edit,
    Named,
    Record,
    ablate,
    edit,
    patch,
    record,
    scope,
    tap,
    tapping,
)

__all__ = [
    "Edit",
    "Named",
    "Record",
    "ablate",
    "direct_logit_attribution",
    "edit",
    "head_attribution",
    "induction_score",
    "induction_scores",
    "lens",
    "logit_lens",
    "patch",
    "patching_grid",
    "previous_token_scores",
    "record",
    "repeated_tokens",
    "residual_stream",
    "scope",
    "tap",
    "tapping",
]
