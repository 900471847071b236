"""The project's tests: unit (no server), integration (the embedded server), labs (the notebooks' records)."""

import os


def utf8_child(**extra: str) -> dict[str, str]:
    """The environment of a Python child whose output a test reads (with encoding="utf-8").

    UTF-8 on every OS: on Windows a piped stdout is otherwise written in the ANSI code page.
    Read when called, so it carries the test session's LABKIT_HOME and LABKIT_RESULTS.
    """
    return {**os.environ, "PYTHONUTF8": "1", **extra}


def docker_python_base() -> str:
    """The Python image docker/'s images are built on: LABKIT_DOCKER_PYTHON (a local stand-in), else the official."""
    return os.environ.get("LABKIT_DOCKER_PYTHON", "").strip() or "python:3.12-slim-trixie"
