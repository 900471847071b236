"""LABKIT_DSN: any existing PostgreSQL (a course server, a cloud one); labkit starts and stops nothing.

LABKIT_PASSWORD_FILE, when set, names a file whose first line is the password (docker/compose.yaml
generates one per classroom): the connection string then needs none.
"""

from __future__ import annotations

import os
from pathlib import Path

import psycopg.conninfo

from .backend import Server, Status
from .errors import UsageError


class ExternalServer(Server):
    """The server a connection string names."""

    kind = "external"

    def __init__(self, dsn: str):
        try:
            self.parameters = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as error:
            raise UsageError(f"LABKIT_DSN is not a valid connection string: {error}") from None
        self.base = dsn

    def conninfo(self, database: str | None = None) -> str:
        if database is None:
            return self.base
        return psycopg.conninfo.make_conninfo(self.base, dbname=database)

    def where(self) -> str:
        """host:port of the server, for messages (never the password)."""
        return f"{self.parameters.get('host', 'local socket')}:{self.parameters.get('port', '5432')}"

    def status(self) -> Status:
        return Status(self.kind, True, listens=self.where())


def from_environment() -> ExternalServer:
    """The server of LABKIT_DSN."""
    dsn = os.environ.get("LABKIT_DSN")
    if not dsn:
        raise UsageError("LABKIT_BACKEND=external needs LABKIT_DSN (a connection string or URI).")
    server = ExternalServer(dsn)
    password_file = os.environ.get("LABKIT_PASSWORD_FILE", "").strip()
    if password_file:
        server.base = psycopg.conninfo.make_conninfo(server.base, password=read_password(Path(password_file)))
    return server


def read_password(path: Path) -> str:
    """The first line of ``path`` (LABKIT_PASSWORD_FILE), or a UsageError that says what is wrong with it."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "it is not UTF-8 text"
        raise UsageError(f"LABKIT_PASSWORD_FILE names {path}, which cannot be read ({reason}): point it at the file "
                         "holding the server's password, or unset it and put the password in LABKIT_DSN.") from None
    if not lines or not lines[0]:
        raise UsageError(f"LABKIT_PASSWORD_FILE names {path}, whose first line is empty: it must hold the server's "
                         "password.")
    return lines[0]
