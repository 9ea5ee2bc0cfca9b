"""``python -m pytest_retrieval``: see :mod:`pytest_retrieval.cli`."""

from .cli import main

if __name__ == "__main__":  # imported (a walk over the package's modules): nothing runs
    raise SystemExit(main())
