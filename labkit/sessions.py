"""Named sessions (T1, T2, ...) whose statements may block without freezing the kernel.

Each session has its own connection and runs its statements in its own thread. The
caller waits while the statement makes progress; as soon as the server reports that
the session waits for a lock, the caller gets a :class:`Waiting` outcome naming the
blocker ("T2 is waiting for a lock held by T1") and the statement goes on in the
background until a later statement (T1's ``commit``) releases it.

Lock and statement timeouts guard every session, so nothing waits forever. A timeout
given for one statement (``%%sql --lock-timeout 2s``) holds for that statement only.

A session whose server restarted since its last statement connects again by itself; if it
was inside a transaction, which the restart rolled back, it says so once instead of running
the next statement outside of it.
"""

from __future__ import annotations

import dataclasses
import logging
import select
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from . import db
from .errors import LabkitError, UsageError
from .queries import query

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_LOCK_TIMEOUT = "5min"
DEFAULT_STATEMENT_TIMEOUT = "10min"
IDLE_IN_TRANSACTION_TIMEOUT = "30min"
TIMEOUTS = ("lock_timeout", "statement_timeout")
# How long a statement must sit in a lock wait before the cell returns.
REPORT_WAIT_AFTER_S = 0.3


@dataclass(frozen=True)
class Result:
    """A finished statement (or several): result tables and command tags."""

    session: str
    frames: tuple = ()
    statuses: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    sql: str = ""
    note: str = ""  # what happened to the session before the statement (it connected again)

    @property
    def frame(self):
        """The last result table (None when no statement returned rows)."""
        return self.frames[-1] if self.frames else None

    def message(self) -> str:
        return "; ".join(self.statuses)


@dataclass(frozen=True)
class Failed:
    """A statement the server refused; the error is often the lesson, so it passes unchanged."""

    session: str
    error: str  # as the server wrote it: ERROR, DETAIL, HINT lines
    sqlstate: str | None
    sql: str = ""
    exception: psycopg.Error | None = None  # what psycopg raised, for callers that re-raise it
    note: str = ""

    def message(self) -> str:
        return f"{self.session}: {self.error}"


@dataclass(frozen=True)
class Waiting:
    """A statement that is blocked and goes on in the background."""

    session: str
    blocked_by: tuple[str, ...]
    wait_event: str
    sql: str = ""
    note: str = ""

    def message(self) -> str:
        holders = " and ".join(self.blocked_by) or "another transaction"
        return (
            f"{self.session} is waiting for a lock held by {holders} ({self.wait_event}); "
            f"it goes on in the background. Release the lock (e.g. commit in {holders}) to let it finish."
        )


@dataclass(frozen=True)
class OpenTransaction:
    """A session idle inside a transaction: it keeps its locks (and its snapshot) until it ends."""

    session: str
    state: str
    open_s: float
    holds: tuple[str, ...]  # "table (lock mode)"

    def message(self) -> str:
        """One line: who, since when, what it holds, and how to end it.

        >>> OpenTransaction("T1", "idle in transaction", 42.4, ("items (RowExclusiveLock)",)).message()
        'T1 has been idle in a transaction for 42 s, holding items (RowExclusiveLock): end it with a %%sql --session T1 cell that runs rollback (or commit).'
        """
        holds = f", holding {', '.join(self.holds)}" if self.holds else ""
        failed = " (after an error inside a savepoint)" if "aborted" in self.state else ""
        return (f"{self.session} has been idle in a transaction{failed} for {self.open_s:,.0f} s{holds}: end it "
                f"with a %%sql --session {self.session} cell that runs rollback (or commit).")


#: how a statement ended, as far as the caller is concerned
Ended = Result | Failed
Outcome = Result | Failed | Waiting


def short_error(error: psycopg.Error) -> str:
    """``ERROR: message`` plus the detail line, without Python's traceback."""
    diag = error.diag
    text = diag.message_primary or str(error).splitlines()[0]
    severity = diag.severity or "ERROR"
    lines = [f"{severity}:  {text}"]
    if diag.message_detail:
        lines.append(f"DETAIL:  {diag.message_detail}")
    if diag.message_hint:
        lines.append(f"HINT:  {diag.message_hint}")
    return "\n".join(lines)


class Session:
    """One named connection that runs statements in its own thread."""

    def __init__(self, name: str, *, registry: Sessions,
                 lock_timeout: str = DEFAULT_LOCK_TIMEOUT, statement_timeout: str = DEFAULT_STATEMENT_TIMEOUT):
        self.name = name
        self._registry = registry
        self.timeouts = {"lock_timeout": lock_timeout, "statement_timeout": statement_timeout}
        # Settings to put back once the session is outside a transaction, with the value that a cell
        # set (put back only if it is still in force) or None (put back in any case).
        self._owed: dict[str, tuple[str, str | None]] = {}
        self._lost_transaction = False  # its connection was lost inside a transaction: say so before going on
        self._lost_why = ""  # what the server said as it ended the connection
        self._server_started = None  # the server's start time when the session connected: was it restarted since?
        self._note = ""
        self.pending: Future[Ended] | None = None
        self.pending_sql = ""
        self.pending_note = ""
        self._connect()

    def _connect(self) -> None:
        self.connection = self._registry.connect(db.session_name(self.name))
        self.pid = self.connection.info.backend_pid
        self._owed = {}
        try:
            self._set({**self.timeouts, "idle_in_transaction_session_timeout": IDLE_IN_TRANSACTION_TIMEOUT})
            self._server_started = db.one(self.connection, query("server_started"))
        except psycopg.Error as error:
            self.connection.close()
            raise UsageError(f"{self.name}: {db.message(error)}.") from None

    def _set(self, settings: dict[str, str], *, local: bool = False) -> None:
        """Set these settings for the session (``local``: until the transaction ends), all or none of them.

        One statement: a value the server refuses leaves every setting as it was.
        """
        if not settings:
            return
        calls = ", ".join("set_config(%s, %s, %s)" for _ in settings)
        params = [item for name, value in settings.items() for item in (name, value, local)]
        self.connection.execute(f"select {calls}", params)

    def _current(self, names) -> dict[str, str]:
        names = list(names)
        if not names:
            return {}
        row = self.connection.execute("select " + ", ".join("current_setting(%s)" for _ in names), names).fetchone()
        return dict(zip(names, row or ()))

    @property
    def _status(self) -> TransactionStatus:
        return self.connection.info.transaction_status

    def _settle(self) -> None:
        """Outside a transaction, put back what a cell's own timeouts replaced (unless SQL changed it since)."""
        if not self._owed or self._status != TransactionStatus.IDLE:
            return  # a setting made inside a transaction would be undone if it rolled back
        current = self._current(self._owed)
        self._set({name: value for name, (value, cells) in self._owed.items() if cells in (None, current[name])})
        self._owed = {}

    def _set_for_statement(self, timeouts: dict[str, str]) -> dict[str, str]:
        """Set a statement's own timeouts; the values they replace, to put back after it."""
        previous = self._current(timeouts)
        if self._status == TransactionStatus.IDLE:
            # Set for the session, at once (autocommit): a transaction the statement opens keeps them.
            self._set(timeouts)
            self._owed.update({name: (previous[name], value) for name, value in timeouts.items()})
        else:
            self._set(timeouts, local=True)
        return previous

    def configure(self, *, lock_timeout: str | None = None, statement_timeout: str | None = None) -> None:
        """Change the session's own timeouts (its statements' unless one is given its own)."""
        self._refuse_if_busy()
        self._connect_again_if_lost()
        changed = {name: value for name, value in (("lock_timeout", lock_timeout),
                                                   ("statement_timeout", statement_timeout)) if value is not None}
        try:
            self._set(changed)  # checked by the server now: a bad value is refused here, not at the next statement
        except psycopg.Error as error:
            raise UsageError(f"{self.name}: {db.message(error)}.") from None
        self.timeouts.update(changed)
        if self._status != TransactionStatus.IDLE:  # a rollback would undo them: set them again after it
            self._owed.update({name: (value, None) for name, value in changed.items()})

    @property
    def busy(self) -> bool:
        return self.pending is not None and not self.pending.done()

    def _refuse_if_busy(self) -> None:
        # Its connection is in use by its thread: waiting for it would block the caller as long as the statement.
        if self.busy:
            raise UsageError(
                f"{self.name} is still running its previous statement ({self.pending_sql[:60]!r}); "
                f"release the lock it waits for, or cancel it with lab.session({self.name!r}).cancel()."
            )

    def _server_spoke(self) -> bool:
        """Whether the server sent something while the session was idle (at a restart: its goodbye)."""
        if sys.platform == "win32":  # no poll there; select takes any socket, whatever its number
            readable, _, _ = select.select([self.connection.fileno()], [], [], 0)
            return bool(readable)
        poller = select.poll()  # select() refuses descriptors past 1023, which a busy kernel may reach
        poller.register(self.connection.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    def _connect_again_if_lost(self) -> None:
        """Connect again if the server ended this connection since the last statement (it restarted)."""
        if not self.connection.closed:
            if not self._server_spoke():
                return
            in_transaction = self._status != TransactionStatus.IDLE
            try:
                self.connection.execute("")  # a notification, or the server's goodbye: an empty query tells
                return
            except psycopg.Error as error:
                if not db.is_lost(error) and not self.connection.closed:
                    return  # an error from a connection that answers: it is not lost
                self._lost_why = self._lost_why or db.message(error)
            self._lost_transaction = self._lost_transaction or in_transaction
        started_before = self._server_started
        self.connection.close()
        self._connect()  # a server that is not running: the connection error goes up (the lab says ServerGone)
        lost, self._lost_transaction = self._lost_transaction, False
        why, self._lost_why = self._lost_why, ""
        # The server's start time tells a restart from a connection the server ended alone (pg_terminate_backend,
        # a timeout such as idle_in_transaction_session_timeout, another backend's crash)
        restarted = started_before is None or self._server_started != started_before
        if restarted:
            what = "the lab server restarted (a setting such as max_connections changed, maybe in another notebook)"
            since = "the lab server had restarted since its last statement"
        else:
            said = f" ({why})" if why else ""
            what = f"the server ended its connection{said}, without restarting,"
            since = f"the server had ended its connection since its last statement{said}, without restarting"
        log.info("session %s connected again: %s", self.name, since)
        if lost:
            raise LabkitError(
                f"{self.name}'s transaction was lost: {what} and rolled it back; this statement did not run. "
                f"{self.name} is connected again, and its next statement opens a new transaction: run the "
                f"transaction again from its begin.")
        self._note = f"({self.name} connected again: {since}, so settings made with SET are back to their defaults.)"

    def _execute(self, sql: str, params=None, timeouts: dict[str, str] | None = None, note: str = "") -> Ended:
        import pandas as pd

        started = time.monotonic()
        frames, statuses = [], []
        in_transaction = self._status != TransactionStatus.IDLE
        try:
            self._settle()
            previous = {}
            # In a failed transaction nothing can be set, and the statement can only end it (or
            # return to a savepoint): it runs without its own timeouts rather than not at all.
            if timeouts and self._status != TransactionStatus.INERROR:
                previous = self._set_for_statement(timeouts)
            try:
                with self.connection.cursor() as cursor:
                    cursor.execute(sql, params)
                    while True:
                        if cursor.description:
                            columns = [column.name for column in cursor.description]
                            frames.append(pd.DataFrame(cursor.fetchall(), columns=columns))
                        if cursor.statusmessage:
                            statuses.append(cursor.statusmessage)
                        if not cursor.nextset():
                            break
            finally:
                if previous and self._status == TransactionStatus.INTRANS:
                    self._set(previous, local=True)  # the rest of the transaction runs without them
                if not self.connection.closed:
                    self._settle()
        except psycopg.Error as error:
            if db.is_lost(error):
                self._lost_transaction = self._lost_transaction or in_transaction
                self._lost_why = self._lost_why or db.message(error)
            return Failed(self.name, short_error(error), error.sqlstate, sql, error, note)
        return Result(self.name, tuple(frames), tuple(statuses), time.monotonic() - started, sql, note)

    def submit(self, sql: str, params=None, *, timeouts: dict[str, str] | None = None) -> Future[Ended]:
        """Start ``sql`` in the session's thread (``timeouts``, e.g. ``{"lock_timeout": "2s"}``, for it only)."""
        self._refuse_if_busy()
        unknown = set(timeouts or ()) - set(TIMEOUTS)
        if unknown:
            raise UsageError(f"Unknown timeout(s) {', '.join(sorted(unknown))}: give {' or '.join(TIMEOUTS)}.")
        self._connect_again_if_lost()
        note, self._note = self._note, ""
        future = self._start(lambda: self._execute(sql, params, timeouts, note), sql)
        self.pending_note = note
        return future

    def start(self, work: Callable[[psycopg.Connection], T], sql: str = "", *, reconnect: bool = True) -> Future[T]:
        """Run ``work(connection)`` in the session's thread: what an interleaving's step does (labkit.interleave).

        The session is busy until it ends, as with :meth:`submit`; ``sql`` names what it runs. Its
        outcome is the caller's: a cell's ``finished_elsewhere`` never reports it. ``reconnect=False``:
        a connection the server ended stays ended (in an interleaving, that is the experiment's result).
        """
        self._refuse_if_busy()
        if reconnect:
            self._connect_again_if_lost()
        self._note = ""
        return self._start(lambda: work(self.connection), sql)

    def _start(self, work: Callable[[], T], sql: str) -> Future[T]:
        future: Future = Future()
        future.set_running_or_notify_cancel()
        # A daemon thread, not a pool's worker: the interpreter joins those at exit, before lab.close
        # (atexit) could cancel a statement that waits for a lock, so a script would end only with the wait.
        threading.Thread(target=_work, args=(future, work), daemon=True, name=f"labkit-session-{self.name}").start()
        self.pending = future
        self.pending_sql = sql
        self.pending_note = ""
        return future

    def run(self, sql: str, params=None, *, report_wait_after: float = REPORT_WAIT_AFTER_S,
            timeouts: dict[str, str] | None = None) -> Outcome:
        """Run ``sql``: a Result or Failed when it ends, a Waiting when it blocks on a lock.

        ``timeouts`` (``lock_timeout``, ``statement_timeout``) hold for this statement only.
        """
        future = self.submit(sql, params, timeouts=timeouts)
        waited_since = None
        try:
            while True:
                try:
                    outcome = future.result(timeout=0.05)
                    self.pending = None
                    return outcome
                except TimeoutError:
                    pass
                waiting = self._registry.lock_wait(self)
                if waiting is None:
                    waited_since = None
                    continue
                waited_since = waited_since or time.monotonic()
                if time.monotonic() - waited_since >= report_wait_after:
                    return dataclasses.replace(waiting, note=self.pending_note)
        except KeyboardInterrupt:
            self.cancel()
            raise

    def cancel(self) -> None:
        """Cancel the statement this session is running (it fails with 'canceling statement')."""
        pending = self.pending
        if pending is not None and not pending.done():
            self.connection.cancel_safe()
            try:
                pending.result(timeout=5)
            except Exception:  # noqa: BLE001 - the outcome of a cancelled statement does not matter
                pass

    def close(self) -> None:
        try:
            self.cancel()
        finally:
            self.connection.close()


def _work(future: Future, work: Callable[[], object]) -> None:
    try:
        future.set_result(work())
    except BaseException as error:  # noqa: BLE001 - the caller gets it from the future
        future.set_exception(error)


@dataclass
class Sessions:
    """The sessions of one lab, and a monitor connection that sees who blocks whom."""

    conninfo: Callable[[], str]  # asked at each new connection: a restarted server may move
    # what a failed connection means: the error to raise instead (ServerGone when the server is not running), or None
    gone: Callable[[psycopg.OperationalError], Exception | None] = lambda error: None
    sessions: dict[str, Session] = field(default_factory=dict)
    _monitor: psycopg.Connection | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, name: str, **timeouts) -> Session:
        unknown = sorted(set(timeouts) - {"lock_timeout", "statement_timeout"})
        if unknown:
            raise UsageError(f"A session takes lock_timeout and statement_timeout (e.g. \"2s\"), not {', '.join(unknown)}.")
        if name not in self.sessions:
            self.sessions[name] = Session(name, registry=self, **timeouts)
        elif timeouts:
            self.sessions[name].configure(**timeouts)
        return self.sessions[name]

    def connect(self, application_name: str) -> psycopg.Connection:
        """A connection for a session or the monitor; a server that is gone is said as :attr:`gone` says it."""
        try:
            return db.connect(self.conninfo(), application_name)
        except psycopg.OperationalError as error:
            said = self.gone(error)
            if said is not None:
                raise said from None
            raise

    def monitor(self) -> psycopg.Connection:
        if self._monitor is None or self._monitor.closed:
            self._monitor = self.connect(db.MONITOR)
        return self._monitor

    def _monitor_rows(self, sql: str, params: dict) -> list[tuple]:
        """The rows of a query on the monitor connection, connecting again once if the server restarted."""
        with self._lock:
            try:
                return self.monitor().execute(sql, params).fetchall()
            except psycopg.OperationalError as error:
                if not db.is_lost(error):
                    raise
            # The server restarted (another notebook's lab.set, say) since the last query: connect again.
            if self._monitor is not None:
                self._monitor.close()
            self._monitor = None
            return self.monitor().execute(sql, params).fetchall()

    def name_of(self, pid: int) -> str:
        for session in self.sessions.values():
            if session.pid == pid:
                return session.name
        return f"pid {pid}"

    def lock_wait(self, session: Session) -> Waiting | None:
        """A Waiting outcome if ``session`` waits for a lock now, else None."""
        rows = self._monitor_rows(query("lock_wait"), {"pid": session.pid})
        row = rows[0] if rows else None
        if not row or row[0] != "Lock":
            return None
        if row[2] and self._only_autovacuum(row[2]):
            return None  # PostgreSQL cancels an autovacuum that blocks a statement (after deadlock_timeout)
        blockers = tuple(self.name_of(pid) for pid in row[2])
        return Waiting(session.name, blockers, f"Lock: {row[1]}", session.pending_sql)

    def open_transactions(self) -> list[OpenTransaction]:
        """This lab's sessions that sit idle inside a transaction (a run would wait behind their locks)."""
        names = {session.pid: name for name, session in self.sessions.items() if not session.connection.closed}
        if not names:
            return []
        rows = self._monitor_rows(query("open_transactions"), {"pids": list(names)})
        # A pid is only this lab's session if the backend is still that session's (pids get reused), by its
        # name as the server keeps it (shortened, escaped)
        return [OpenTransaction(names[pid], state, open_s, tuple(holds)) for pid, application, state, open_s, holds
                in rows if application == db.shown_name(db.session_name(names[pid]))]

    def _only_autovacuum(self, pids: list[int]) -> bool:
        kinds = self._monitor_rows(query("backend_kinds"), {"pids": list(pids)})
        return bool(kinds) and all(kind == "autovacuum worker" and "wraparound" not in (query or "")
                                   for kind, query in kinds)

    def finished_elsewhere(self, current: str, settle_s: float = 0.3) -> list:
        """Outcomes of other sessions' background statements that have finished now."""
        deadline = time.monotonic() + settle_s
        done = []
        for session in self.sessions.values():
            if session.name == current or session.pending is None:
                continue
            remaining = max(0.0, deadline - time.monotonic())
            try:
                outcome = session.pending.result(timeout=remaining)
            except TimeoutError:
                continue
            except Exception:  # noqa: BLE001 - work given to start() and abandoned by its caller: not a statement's
                outcome = None
            session.pending = None
            if isinstance(outcome, (Result, Failed)):  # not what start()'s callers left behind
                done.append(outcome)
        return done

    def close(self) -> None:
        try:
            for session in self.sessions.values():
                session.close()
        finally:
            self.sessions.clear()
            if self._monitor is not None:
                self._monitor.close()
