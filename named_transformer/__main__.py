"""``python -m named_transformer``: see :mod:`named_transformer.workflows.cli`."""

from named_transformer._startup import started
from named_transformer.workflows.cli import main

started()  # imported: from here on the command line reports Ctrl-C itself
raise SystemExit(main())
