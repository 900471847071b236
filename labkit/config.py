"""Where labkit keeps things, read from the environment each time it is asked.

| variable          | meaning                                                      |
|-------------------|--------------------------------------------------------------|
| LABKIT_PROFILE    | ci, laptop (default) or article                              |
| LABKIT_HOME       | the embedded server's home (cluster, socket, state)          |
| LABKIT_RESULTS    | where run records are saved                                  |
| LABKIT_DSN        | use this existing server instead of the embedded one         |
| LABKIT_BACKEND    | embedded (default), external (implied by LABKIT_DSN), docker |
| LABKIT_IDLE_STOP  | seconds the embedded server stays up once no kernel uses it  |
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "labkit"


def is_root() -> bool:
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
    return Path(platformdirs.user_data_dir(APP)).resolve()


def results_dir() -> Path:
    """Where run records (JSON) are saved."""
    explicit = os.environ.get("LABKIT_RESULTS")
    if explicit:
        return Path(explicit).expanduser().resolve()
    return Path(platformdirs.user_data_dir(APP)).resolve() / "results"


def backend() -> str:
    name = os.environ.get("LABKIT_BACKEND", "").strip().lower()
    if not name:
        return "external" if os.environ.get("LABKIT_DSN") else "embedded"
    return name


def idle_stop_seconds() -> float:
    return float(os.environ.get("LABKIT_IDLE_STOP", "600"))


def private_dir(path: Path, mode: int = 0o700) -> Path:
    """Create ``path`` (and parents) if needed; the leaf gets ``mode``, never world-writable."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode & ~0o002)
    return path
