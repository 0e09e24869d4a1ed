"""Where snapeval finds what it does not ship: the repository checkout, and the shared benchmark data beside it."""
from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The checkout this package runs from (``snapeval/`` lives directly below it)."""
    return Path(__file__).resolve().parents[1]


def default_data_dir() -> Path:
    """``$SNAPEVAL_DATA_DIR`` if set, else ``shared/data`` beside the repository checkout."""
    env = os.environ.get("SNAPEVAL_DATA_DIR")
    return Path(env) if env else repo_root().parent / "shared" / "data"
