"""Logging filters for the test project's settings."""

from __future__ import annotations

import logging


class MessageContains(logging.Filter):
    """Passes the records whose message contains ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text in record.getMessage()
