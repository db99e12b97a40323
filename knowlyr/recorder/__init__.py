"""The recorder: turn other agents' logs into :class:`~knowlyr.trajectory.Trajectory` objects.

One adapter per log format (``knowlyr.recorder.adapters``), registered by name; formats are
detected per file; secrets are redacted before anything is parsed or kept; bad records are
quarantined with a reason and the batch goes on (``read == converted + rejected``).

Example:
    >>> from knowlyr.recorder import convert, iter_records, Converted
    >>> report = convert(["tests/data/fixtures/swe_agent"])  # doctest: +SKIP
    >>> report.converted, report.trajectories[0].tools_used()[:2]  # doctest: +SKIP
    (3, ['find_file', 'open'])
"""

from __future__ import annotations

from knowlyr.recorder.base import (
    Adapter,
    get_adapter,
    list_formats,
    register_adapter,
    unregister_adapter,
)
from knowlyr.recorder.files import detect_format, iter_files, shown_path
from knowlyr.recorder.jsonl import Written, write_jsonl
from knowlyr.recorder.pipeline import (
    Converted,
    ConvertReport,
    Encoded,
    Rejected,
    convert,
    iter_bytes,
    iter_encoded,
    iter_records,
)
from knowlyr.recorder.redact import (
    PII_CLASSES,
    Redaction,
    RedactionPolicy,
    redact_bytes,
    redact_text,
)

__all__ = [
    "PII_CLASSES",
    "Adapter",
    "ConvertReport",
    "Converted",
    "Encoded",
    "Redaction",
    "RedactionPolicy",
    "Rejected",
    "Written",
    "convert",
    "detect_format",
    "get_adapter",
    "iter_bytes",
    "iter_encoded",
    "iter_files",
    "iter_records",
    "list_formats",
    "redact_bytes",
    "redact_text",
    "register_adapter",
    "shown_path",
    "unregister_adapter",
    "write_jsonl",
]
