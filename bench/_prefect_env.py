"""A bench script's own Prefect home and quiet, offline settings (set before Prefect imports)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def isolate(prefix: str) -> str:
    """Put the checkout on ``sys.path`` and give this run a fresh ``PREFECT_HOME``; returns it."""
    sys.path.insert(0, str(ROOT))
    home = tempfile.mkdtemp(prefix=prefix)
    os.environ.update(
        PREFECT_HOME=home,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_LOGGING_LEVEL="ERROR",
        PREFECT_SERVER_LOGGING_LEVEL="CRITICAL",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        TRL_EXPERIMENTAL_SILENCE="1",
    )
    return home
