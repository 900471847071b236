"""The one exception type students see: a short sentence that says what to do."""

from __future__ import annotations


class LabkitError(RuntimeError):
    """A problem labkit can explain in a sentence or two.

    The message is shown to the student as it is (the magics print it without a
    traceback), so it says what happened and what to do about it.
    """

    def __init__(self, message: str, *, detail: str | None = None):
        self.detail = detail
        super().__init__(message if not detail else f"{message}\n{detail}")
        self.short = message


class UsageError(LabkitError):
    """Bad input from the user: an unknown option, an out-of-range value."""


def tail(text: str, lines: int = 15) -> str:
    """The last ``lines`` lines of ``text`` (for attaching a log to an error)."""
    rows = [row for row in text.splitlines() if row.strip()]
    return "\n".join(rows[-lines:])


def connection_problem(error: BaseException) -> str:
    """One line on why a connection failed: libpq's reason (its first line), without the hint below it.

    >>> connection_problem(Exception('connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused\\n\\tIs the server running on that host?'))
    'connection to server at "127.0.0.1", port 1 failed: Connection refused'
    """
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[0].removeprefix("connection failed: ")
