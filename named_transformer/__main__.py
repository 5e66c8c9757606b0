"""``python -m named_transformer``: see :mod:`named_transformer.workflows.cli`."""

from named_transformer.workflows.cli import main

raise SystemExit(main())
