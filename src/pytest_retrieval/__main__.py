"""``python -m pytest_retrieval``: see :mod:`pytest_retrieval.cli`."""

from .cli import main

raise SystemExit(main())
