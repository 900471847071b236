"""Connecting to the lab server: every connection labkit opens is made here, named by its role.

A connection's ``application_name`` says who opened it, so that the server's own views
(``pg_stat_activity``) and labkit's SQL filters can tell a run's clients from labkit's
probes and from a student's named sessions:

| role                 | application_name      | opened by                                   |
|----------------------|-----------------------|---------------------------------------------|
| a named session      | ``labkit-T1``         | ``lab.session("T1")``, ``%%sql --session``  |
| a run's clients      | ``labkit-run-<hex>``  | pgbench (``PGAPPNAME``), one name per run   |
| the probes           | ``labkit-probe``      | the sampler beside a run                    |
| the lock monitor     | ``labkit-monitor``    | the sessions, to see who blocks whom; an    |
|                      |                       | experiment's counts of server events; a     |
|                      |                       | ``%%steps`` spec's control connection, which|
|                      |                       | also runs the spec's ``setup`` and          |
|                      |                       | ``teardown`` SQL, as the isolation tester   |
|                      |                       | runs them on its own control connection     |
| everything else      | ``labkit-admin``      | settings, databases, checks, the watchdog,  |
|                      |                       | and ``lab.connect``, ``lab.value``,         |
|                      |                       | ``lab.copy``, ``lab.engine``                |

Session names may not take a name of labkit's own (``probe``, ``run-...``, ...).
"""

from __future__ import annotations

import logging
import re
import uuid

import psycopg

from .errors import UsageError
from .queries import query

log = logging.getLogger(__name__)

PREFIX = "labkit-"
PROBE = PREFIX + "probe"
MONITOR = PREFIX + "monitor"
ADMIN = PREFIX + "admin"
RUN = PREFIX + "run-"
_RESERVED = re.compile(r"(probe|monitor|admin|run-.*)", re.IGNORECASE)
CONNECT_TIMEOUT_S = 5
SHOWN_NAME_BYTES = 63  # NAMEDATALEN - 1: what pg_stat_activity keeps of an application_name

# SQLSTATE classes of a connection that is gone: class 08 (connection exception) and the
# server shutting down (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now).
_LOST = ("08", "57P01", "57P02", "57P03")


def session_name(name: str) -> str:
    """The application_name of the named session ``name``.

    >>> session_name("T1")
    'labkit-T1'
    """
    if _RESERVED.fullmatch(name):
        raise UsageError(f"{name!r} is a name labkit uses for its own connections: name the session otherwise "
                         "(e.g. T1, buyer, worker2).")
    return PREFIX + name


def shown_name(application_name: str) -> str:
    """An application_name as the server shows it in ``pg_stat_activity``, where labkit's filters read it back.

    The server writes each byte outside printable ASCII as ``\\xNN`` (``pg_clean_ascii``) and
    keeps the first 63 bytes (``NAMEDATALEN - 1``, in ``pgstat_report_appname``).

    >>> shown_name("labkit-T1"), shown_name("labkit-é")
    ('labkit-T1', 'labkit-\\\\xc3\\\\xa9')
    >>> len(shown_name("labkit-" + "buyer" * 20))
    63
    """
    clean = "".join(chr(byte) if 32 <= byte <= 126 else f"\\x{byte:02x}" for byte in application_name.encode())
    return clean[:SHOWN_NAME_BYTES]


def run_name() -> str:
    """A new run's application_name (pgbench's clients carry it; found again to end them)."""
    return RUN + uuid.uuid4().hex[:8]


def connect(conninfo: str, application_name: str = ADMIN, *, autocommit: bool = True,
            timeout_s: float = CONNECT_TIMEOUT_S, **options) -> psycopg.Connection:
    """A connection with labkit's options: autocommit, a connect timeout, and a name for its role."""
    return psycopg.connect(conninfo, autocommit=autocommit, connect_timeout=max(1, round(timeout_s)),
                           application_name=application_name, **options)


def row(connection: psycopg.Connection, sql: str, params: dict | None = None) -> tuple:
    """The one row ``sql`` returns (an error if it returns none)."""
    found = connection.execute(sql, params).fetchone()
    if found is None:
        raise psycopg.ProgrammingError(f"no row from: {sql.strip().splitlines()[0][:80]}")
    return found


def one(connection: psycopg.Connection, sql: str, params: dict | None = None):
    """The first value of the one row ``sql`` returns."""
    return row(connection, sql, params)[0]


def engine(conninfo: str, application_name: str = ADMIN):
    """A SQLAlchemy engine whose connections are made here (``pandas.read_sql`` reads through it).

    No pool: each use connects and disconnects, as the rest of labkit does.
    """
    import sqlalchemy

    return sqlalchemy.create_engine("postgresql+psycopg://", creator=lambda: connect(conninfo, application_name),
                                    poolclass=sqlalchemy.pool.NullPool)


def is_lost(error: BaseException) -> bool:
    """Whether ``error`` says the connection is gone (rather than a statement failing on a live one)."""
    if not isinstance(error, psycopg.Error):
        return False
    # FATAL: the server ended the connection, whatever the error's class (idle_in_transaction_session_timeout's
    # 25P03 is an InternalError to psycopg)
    if error.diag.severity_nonlocalized == "FATAL":
        return True
    state = error.sqlstate
    return isinstance(error, psycopg.OperationalError) and (state is None or state.startswith(_LOST))


def message(error: BaseException) -> str:
    """The server's one-line message for ``error`` (never "None" when psycopg has no primary message).

    >>> message(ValueError("first line\\nsecond"))
    'first line'
    """
    diag = getattr(error, "diag", None)
    primary = diag.message_primary if diag is not None else None
    if primary:
        return primary.strip()
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def server_error(error: BaseException) -> BaseException:
    """Psycopg's own error inside what pandas and SQLAlchemy wrap it in (``error`` itself if none)."""
    seen = error
    for _ in range(5):
        if isinstance(seen, psycopg.Error):
            return seen
        inner = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
        if inner is None:
            break
        seen = inner
    return error


def terminate_runs(conninfo: str, application_names: list[str]) -> int:
    """End the backends of these runs (pgbench's clients, found by their application_name); how many.

    Used when a run's pgbench is gone but its backends may stay: a backend waiting for a lock
    notices that its client died only when it next reads or writes to it, or, where the OS
    allows it, at ``client_connection_check_interval``.
    """
    names = [name for name in application_names if name.startswith(RUN)]
    if not names:
        return 0
    try:
        with connect(conninfo) as connection:
            rows = connection.execute(query("terminate_run"), {"names": names}).fetchall()
    except psycopg.Error as error:
        log.warning("could not end the backends of %s: %s", ", ".join(names), message(error))
        return 0
    if rows:
        log.info("ended %d backend(s) of %s", len(rows), ", ".join(names))
    return len(rows)
