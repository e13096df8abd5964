"""The one error type for bad input: it renders as ``file:line: key: what is wrong``."""

from __future__ import annotations


class InputError(Exception):
    """Invalid input: a file, optionally the YAML line and key path, and a one-line message."""

    def __init__(self, file: str, message: str, line: int | None = None, key: str | None = None):
        self.file = file
        self.line = line
        self.key = key
        self.message = " ".join(message.split())
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"
