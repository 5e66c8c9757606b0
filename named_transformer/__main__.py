"""``python -m named_transformer``: see :mod:`named_transformer.cli`."""

from named_transformer.cli import main

raise SystemExit(main())
