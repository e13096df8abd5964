"""The one error type for bad input: it renders as ``file:line: key: what is wrong``."""

from __future__ import annotations

#: Longest quoted input value a message shows; the rest is elided (a message stays one short line).
SHOWN_CHARS = 60


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) as one space."""
    return " ".join(text.split())


def brief(value: object) -> str:
    """``repr(value)`` for a message, cut to SHOWN_CHARS characters."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[: SHOWN_CHARS - 3]}..."


class InputError(Exception):
    """Invalid input: a file, optionally the YAML line and key path, and a one-line message."""

    def __init__(self, file: str, message: str, line: int | None = None, key: str | None = None):
        self.file = file
        self.line = line
        self.key = one_line(key) if key else key
        self.message = one_line(message)
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ArgsError(ValueError):
    """An engine command line the engine would refuse, or one a score cannot read; one line."""

    def __init__(self, message: str):
        super().__init__(one_line(message))
