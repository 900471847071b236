"""Named sessions (T1, T2, ...) whose statements may block without freezing the kernel.

Each session has its own connection and runs its statements in its own thread. The
caller waits while the statement makes progress; as soon as the server reports that
the session waits for a lock, the caller gets a :class:`Waiting` outcome naming the
blocker ("T2 is waiting for a lock held by T1") and the statement goes on in the
background until a later statement (T1's ``commit``) releases it.

Lock and statement timeouts guard every session, so nothing waits forever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import psycopg

from . import db
from .errors import UsageError
from .queries import query

DEFAULT_LOCK_TIMEOUT = "5min"
DEFAULT_STATEMENT_TIMEOUT = "10min"
IDLE_IN_TRANSACTION_TIMEOUT = "30min"
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

    def message(self) -> str:
        return f"{self.session}: {self.error}"


@dataclass(frozen=True)
class Waiting:
    """A statement that is blocked and goes on in the background."""

    session: str
    blocked_by: tuple[str, ...]
    wait_event: str
    sql: str = ""

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

    def __init__(self, name: str, conninfo: str, *, registry: Sessions,
                 lock_timeout: str = DEFAULT_LOCK_TIMEOUT, statement_timeout: str = DEFAULT_STATEMENT_TIMEOUT):
        self.name = name
        self._registry = registry
        self.connection = db.connect(conninfo, db.session_name(name))
        self.pid = self.connection.info.backend_pid
        self.configure(lock_timeout=lock_timeout, statement_timeout=statement_timeout)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"labkit-session-{name}")
        self.pending: Future[Ended] | None = None
        self.pending_sql = ""

    def configure(self, *, lock_timeout: str | None = None, statement_timeout: str | None = None) -> None:
        with self.connection.cursor() as cursor:
            if lock_timeout is not None:
                cursor.execute("select set_config('lock_timeout', %s, false)", (lock_timeout,))
            if statement_timeout is not None:
                cursor.execute("select set_config('statement_timeout', %s, false)", (statement_timeout,))
            cursor.execute("select set_config('idle_in_transaction_session_timeout', %s, false)",
                           (IDLE_IN_TRANSACTION_TIMEOUT,))

    @property
    def busy(self) -> bool:
        return self.pending is not None and not self.pending.done()

    def _execute(self, sql: str, params=None) -> Ended:
        import pandas as pd

        started = time.monotonic()
        frames, statuses = [], []
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
        except psycopg.Error as error:
            return Failed(self.name, short_error(error), error.sqlstate, sql, error)
        return Result(self.name, tuple(frames), tuple(statuses), time.monotonic() - started, sql)

    def submit(self, sql: str, params=None) -> Future[Ended]:
        if self.busy:
            raise UsageError(
                f"{self.name} is still running its previous statement ({self.pending_sql[:60]!r}); "
                f"release the lock it waits for, or cancel it with lab.session({self.name!r}).cancel()."
            )
        self.pending = self._executor.submit(self._execute, sql, params)
        self.pending_sql = sql
        return self.pending

    def run(self, sql: str, params=None, *, report_wait_after: float = REPORT_WAIT_AFTER_S) -> Outcome:
        """Run ``sql``: a Result or Failed when it ends, a Waiting when it blocks on a lock."""
        future = self.submit(sql, params)
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
                    return waiting
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
            self._executor.shutdown(wait=False, cancel_futures=True)
            self.connection.close()


@dataclass
class Sessions:
    """The sessions of one lab, and a monitor connection that sees who blocks whom."""

    conninfo: Callable[[], str]  # asked at each new connection: a restarted server may move
    sessions: dict[str, Session] = field(default_factory=dict)
    _monitor: psycopg.Connection | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, name: str, **timeouts) -> Session:
        if name not in self.sessions:
            self.sessions[name] = Session(name, self.conninfo(), registry=self, **timeouts)
        elif timeouts:
            self.sessions[name].configure(**timeouts)
        return self.sessions[name]

    def monitor(self) -> psycopg.Connection:
        if self._monitor is None or self._monitor.closed:
            self._monitor = db.connect(self.conninfo(), db.MONITOR)
        return self._monitor

    def name_of(self, pid: int) -> str:
        for session in self.sessions.values():
            if session.pid == pid:
                return session.name
        return f"pid {pid}"

    def lock_wait(self, session: Session) -> Waiting | None:
        """A Waiting outcome if ``session`` waits for a lock now, else None."""
        with self._lock:
            row = self.monitor().execute(query("lock_wait"), {"pid": session.pid}).fetchone()
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
        for attempt in (1, 2):
            try:
                with self._lock:
                    rows = self.monitor().execute(query("open_transactions"), {"pids": list(names)}).fetchall()
                break
            except psycopg.OperationalError:
                if attempt == 2:
                    raise
                self._monitor = None  # the server restarted since: connect again
        # A pid is only this lab's session if the backend is still that session's (pids get reused).
        return [OpenTransaction(names[pid], state, open_s, tuple(holds))
                for pid, application, state, open_s, holds in rows if application == db.session_name(names[pid])]

    def _only_autovacuum(self, pids: list[int]) -> bool:
        with self._lock:
            kinds = self.monitor().execute(query("backend_kinds"), {"pids": list(pids)}).fetchall()
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
            session.pending = None
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
