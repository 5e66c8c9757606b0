r"""RASP programs: interpreted, compiled into the library's own modules, and loaded
from Tracr.

:mod:`~named_transformer.rasp.program` embeds the language, :mod:`.interpreter` runs
it in plain Python, :mod:`.compiler` turns it into a
:class:`~named_transformer.rasp.model.CompiledModel` of ``MultiHeadAttention`` and
``FeedForward`` blocks with hand-set weights, :mod:`.tracr` loads Tracr's compiled
weights into the same class, :mod:`.programs` holds the examples.
"""

from named_transformer.rasp.interpreter import evaluate, selector_matrix
from named_transformer.rasp.program import (
    Comparison,
    SOp,
    aggregate,
    categorical,
    indices,
    map,
    numerical,
    select,
    selector_width,
    sequence_map,
    tokens,
)
from named_transformer.rasp.programs import PROGRAMS

__all__ = [
    "PROGRAMS",
    "Comparison",
    "SOp",
    "aggregate",
    "categorical",
    "evaluate",
    "indices",
    "map",
    "numerical",
    "select",
    "selector_matrix",
    "selector_width",
    "sequence_map",
    "tokens",
]
