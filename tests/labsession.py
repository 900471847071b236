"""The test session's lab server: a private LABKIT_HOME, the ci profile, stopped at the end.

Loaded as a pytest plugin (``-p tests.labsession``) so that its environment is set before
anything starts, including the notebook kernels nbval launches (they inherit it). The server's
home and the results folder have a space and a non-ASCII letter in their names, as a macOS
user's data folder (``Application Support``) or a Windows user name may: a path that is split
or mis-encoded anywhere fails the whole session.

Tests marked ``posix`` or ``linux`` rely on that OS's behaviour and are skipped elsewhere.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

_CREATED: list[Path] = []


def pytest_configure(config):
    if "LABKIT_HOME" not in os.environ:
        # Not under pytest's tmp folder: as root the server's own user must be able to enter it.
        home = Path(tempfile.mkdtemp(prefix="labkit test ü-"))
        os.environ["LABKIT_HOME"] = str(home)
        _CREATED.append(home)
    if "LABKIT_RESULTS" not in os.environ:
        results = Path(tempfile.mkdtemp(prefix="labkit results é-"))
        os.environ["LABKIT_RESULTS"] = str(results)
        _CREATED.append(results)
    os.environ.setdefault("LABKIT_PROFILE", "ci")
    os.environ.setdefault("LABKIT_IDLE_STOP", "120")


def pytest_runtest_setup(item):
    if item.get_closest_marker("posix") and os.name != "posix":
        pytest.skip(f"relies on POSIX behaviour; this is {sys.platform}")
    if item.get_closest_marker("linux") and not sys.platform.startswith("linux"):
        pytest.skip(f"relies on Linux behaviour; this is {sys.platform}")


def pytest_unconfigure(config):
    """Stop what this session started; leave nothing running."""
    from labkit.embedded import EmbeddedServer

    for path in _CREATED:
        server = EmbeddedServer(path)
        if server.initialized():
            try:
                server.stop(mode="immediate")
            except Exception:  # noqa: BLE001 - a cleanup failure must not hide the test results
                pass
        shutil.rmtree(path, ignore_errors=True)
