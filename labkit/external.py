"""LABKIT_DSN: any existing PostgreSQL (a course server, a cloud one); labkit starts and stops nothing."""

from __future__ import annotations

import os

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
    return ExternalServer(dsn)
