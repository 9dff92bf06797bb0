"""Readers that turn agent logs and benchmark files into steps.

:func:`normalize_messages` turns a log in any supported shape (OpenAI ``tool_calls``,
legacy OpenAI ``function_call``, Anthropic Messages, ToolBench DFS answer trees) into
canonical OpenAI messages plus a report of what became no step; :func:`read_messages`
turns canonical messages into steps.
"""

from osumem.ingest.formats import (
    FORMATS,
    NormalizedLog,
    Skip,
    detect_format,
    normalize_messages,
    read_logs,
    skip_summary,
)
from osumem.ingest.openai_chat import (
    LogFormatError,
    call_text,
    read_log,
    read_messages,
    steps_to_view,
)

__all__ = [
    "FORMATS",
    "LogFormatError",
    "NormalizedLog",
    "Skip",
    "call_text",
    "detect_format",
    "normalize_messages",
    "read_log",
    "read_logs",
    "read_messages",
    "skip_summary",
    "steps_to_view",
]
