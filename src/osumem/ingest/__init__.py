"""Readers that turn agent logs and benchmark files into steps."""

from osumem.ingest.openai_chat import (
    LogFormatError,
    call_text,
    read_log,
    read_messages,
    steps_to_view,
)

__all__ = ["LogFormatError", "call_text", "read_log", "read_messages", "steps_to_view"]
