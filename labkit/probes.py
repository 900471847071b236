"""Probes: what labkit samples beside a pgbench run, on the run's own time axis.

A probe is a name, a query and an interval. Each probe has its own thread, connection and
schedule, so a slow probe (a ``pgstattuple`` scan) never delays another (the wait events every
250 ms). Each row a probe returns is stored with ``t``, the seconds since the run started::

    lab.pgbench(script, probes=[labkit.probe("pending", "select pending_pages from pgstatginindex('i')")])

A probe that reads cumulative counters (``pg_stat_user_tables.n_tup_upd``) names them in
``counters``: each is stored as its rate since the previous sample, ``<name>_per_s``, so the
chart shows what happened in each interval rather than a total that hides it.

What each built-in probe costs the server it measures:

- ``waits`` (every 250 ms) reads ``pg_stat_activity``: a copy of each backend's status entry,
  taken without locks (``pgstat_read_current_status`` in backend_status.c).
- ``held_by`` (every second) reads ``pg_stat_activity``, and the lock table only while every
  client of the run waits for a heavyweight lock: then one ``pg_locks`` read per sample.
- ``cpu`` (every second) asks the operating system (psutil), not the server.
- ``horizon`` (:data:`HORIZON`, every half second, for a lab to pass) reads ``pg_stat_activity``:
  every backend of the database tied on the oldest xmin, one row each; :func:`horizon_holders`
  names the one holding it back at each instant.

A probe that reads the lock table (``pg_locks``, ``pg_blocking_pids``) takes every lock-manager
partition lock for each call (``GetLockStatusData`` and ``GetBlockerStatusData`` in lock.c):
:attr:`Probe.reads_lock_table` says so, and the run record keeps each probe's rate and cost
(``extra.probe_costs``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, replace

import psycopg

from . import db
from .queries import query

log = logging.getLogger(__name__)

_LOCK_TABLE = re.compile(r"\b(pg_locks|pg_lock_status|pg_blocking_pids|pg_safe_snapshot_blocking_pids)\b", re.I)


@dataclass(frozen=True)
class Probe:
    """A query sampled every ``every_s`` seconds during a run.

    ``per_run`` probes are labkit's own: their SQL names the run's clients by
    ``{application_name}``, which the runner fills in.
    """

    name: str
    sql: str
    every_s: float = 1.0
    per_run: bool = False
    lock_table: str | None = None  # when it reads the lock table, if not on every sample
    counters: tuple[str, ...] = ()  # cumulative columns, stored as ``<name>_per_s`` since the previous sample
    columns: tuple[str, ...] = ()  # the names its columns are stored under (default: the SQL's own)

    @property
    def reads_lock_table(self) -> bool | str:
        """Whether each sample reads the lock table (and so takes all its partition locks), or when it does.

        >>> probe("locks", "select count(*) from pg_locks").reads_lock_table, WAIT_EVENTS.reads_lock_table
        (True, False)
        >>> HELD_BY_PROBE.reads_lock_table
        'only while every client of the run waits for a lock'
        """
        return self.lock_table or bool(_LOCK_TABLE.search(self.sql))

    def for_run(self, application_name: str) -> Probe:
        """This probe with the run's application_name in its SQL (probes that are not per-run: unchanged)."""
        if not self.per_run:
            return self
        if not re.fullmatch(r"[a-z0-9-]+", application_name):
            raise ValueError(f"not a run's application name: {application_name!r}")
        return replace(self, sql=self.sql.replace("{application_name}", application_name), per_run=False)


def probe(name: str, sql: str, every: float = 1.0, *, counters: tuple[str, ...] | list[str] = ()) -> Probe:
    """A probe named ``name`` that runs ``sql`` every ``every`` seconds.

    ``counters`` are columns that only grow (statistics counters): each is stored as its rate
    per second since the previous sample, named ``<column>_per_s``; such a probe returns one row.
    """
    return Probe(name, sql, float(every), counters=tuple(counters))


def rate(previous: dict, row: dict, column: str) -> float | None:
    """How fast counter ``column`` grew per second from sample ``previous`` to sample ``row``.

    None when either value is missing or no time passed between them.

    >>> rate({"t": 0.0, "work": 0}, {"t": 2.0, "work": 100}, "work"), rate({"t": 1.0, "work": 5}, {"t": 1.0, "work": 9}, "work")
    (50.0, None)
    """
    before, now, elapsed = previous.get(column), row.get(column), row["t"] - previous["t"]
    return None if before is None or now is None or elapsed <= 0 else (now - before) / elapsed


def per_second(previous: dict | None, row: dict, counters: tuple[str, ...]) -> dict:
    """``row`` with each counter replaced by its rate since ``previous`` (None for the first sample or a reset).

    >>> first = {"t": 1.0, "updates": 100, "hot_updates": 90}
    >>> per_second(None, first, ("updates", "hot_updates"))
    {'t': 1.0, 'updates_per_s': None, 'hot_updates_per_s': None}
    >>> per_second(first, {"t": 3.0, "updates": 300, "hot_updates": 150}, ("updates", "hot_updates"))
    {'t': 3.0, 'updates_per_s': 100.0, 'hot_updates_per_s': 30.0}
    """
    out = {key: value for key, value in row.items() if key not in counters}
    for name in counters:
        if name not in row:
            raise ValueError(f"probe has no column {name!r} among {sorted(row)}: fix its counters=")
        speed = None if previous is None else rate(previous, row, name)
        out[f"{name}_per_s"] = speed if speed is None or speed >= 0 else None  # a fall: the counters were reset
    return out


def counted(rows: list[dict], *counters: str) -> list[dict]:
    """A counter probe's samples with each counter back as its count since the first sample.

    The probe stored each counter as ``<name>_per_s`` since the previous sample; this multiplies
    each rate by its interval and adds them up. An interval without a rate (the first sample, a
    reset) adds nothing.

    >>> rows = [{"t": 0.0, "updates_per_s": None}, {"t": 2.0, "updates_per_s": 50.0}, {"t": 3.0, "updates_per_s": 10.0}]
    >>> counted(rows, "updates")
    [{'t': 0.0, 'updates': 0.0}, {'t': 2.0, 'updates': 100.0}, {'t': 3.0, 'updates': 110.0}]
    """
    out, totals, previous = [], dict.fromkeys(counters, 0.0), None
    for row in rows:
        for name in counters:
            speed = row.get(f"{name}_per_s")
            if previous is not None and isinstance(speed, (int, float)):
                totals[name] += speed * (row["t"] - previous)
        previous = row["t"]
        out.append({"t": row["t"], **{name: round(totals[name], 6) for name in counters}})
    return out


WAIT_EVENTS = Probe("waits", query("wait_events"), 0.25, per_run=True)
# The backends of this database holding the xmin horizon furthest back, every one tied on the oldest value.
HORIZON = Probe("horizon", query("horizon"), 0.5)
HELD_BY = "held_by"  # every client of the run waits for a lock held outside it: by whom
HELD_BY_PROBE = Probe(HELD_BY, query("held_by"), 1.0, per_run=True,
                      lock_table="only while every client of the run waits for a lock")
CPU = "cpu"  # CPU used by pgbench and by the server, from the operating system
# The name of the probe that samples a run's work counter (see ``work=`` of Lab.pgbench).
WORK = "work"


def horizon_holders(rows: list[dict]) -> list[dict]:
    """The backend that held the xmin horizon at each instant of the :data:`HORIZON` probe, ties broken.

    Backends tie on the oldest value whenever their snapshots were taken while one transaction
    ran: its xid is their xmin. The holder is the one that holds it by its own transaction id (the
    transaction the others' snapshots wait on), else one not waiting for a heavyweight lock (a
    waiter waits for another backend), else the one open longest (the earliest ``xact_start``).
    Each instant's holder row comes with ``tied`` (the backends on the oldest value) and
    ``tied_in_lock_waits`` (those of them waiting for a heavyweight lock, ``Lock: ...``).

    >>> rows = [{"t": 1.0, "open_s": 2.5, "pid": "7", "doing": "Lock: transactionid", "holds_by": "its snapshot"},
    ...         {"t": 1.0, "open_s": 2.4, "pid": "8", "doing": "CPU", "holds_by": "its snapshot"},
    ...         {"t": 1.5, "open_s": 0.1, "pid": "9", "doing": "CPU", "holds_by": "its snapshot"}]
    >>> [(h["t"], h["pid"], h["tied"], h["tied_in_lock_waits"]) for h in horizon_holders(rows)]
    [(1.0, '8', 2, 1), (1.5, '9', 1, 0)]
    """
    instants: dict[float, list[dict]] = {}
    for row in rows:
        instants.setdefault(row["t"], []).append(row)

    def waits_for_a_lock(row: dict) -> bool:
        return str(row.get("doing") or "").startswith("Lock:")

    holders = []
    for tied in instants.values():
        holder = max(tied, key=lambda row: (row.get("holds_by") == "its transaction id", not waits_for_a_lock(row),
                                            row.get("open_s") or 0.0))
        holders.append({**holder, "tied": len(tied), "tied_in_lock_waits": sum(map(waits_for_a_lock, tied))})
    return holders


def longest_held(rows: list[dict]) -> tuple[dict | None, int]:
    """The instant whose horizon holder had been open longest, and how many instants saw a holder at all.

    A maximum of samples is the largest of that many, not the longest the horizon was held: a
    transaction may have stayed open past the last sample that saw it. (None, 0: no instant saw one.)

    >>> longest_held([{"t": 0.5, "open_s": 1.0, "doing": "CPU"}, {"t": 1.0, "open_s": 3.0, "doing": "CPU"}])[0]["t"]
    1.0
    """
    holders = horizon_holders(rows)
    return (max(holders, key=lambda row: row.get("open_s") or 0.0) if holders else None), len(holders)


class _Schedule(threading.Thread):
    """One probe's thread: sample every ``every_s`` on a fixed grid; a late sample skips the slots it missed."""

    def __init__(self, name: str, every_s: float, t0: float, stop: threading.Event):
        super().__init__(name=f"labkit-probe-{name}", daemon=True)
        self.probe_name = name
        self.every_s = every_s
        self.t0 = t0
        self.stopping = stop
        self.rows: list[dict] = []
        self.error: str | None = None
        self.busy_s = 0.0  # time spent sampling: the probe's own cost
        self.samples = 0

    def run(self) -> None:
        try:
            self.open()
        except Exception as error:  # noqa: BLE001 - a probe that cannot start is reported, never raised
            self.error = db.message(error)
            log.warning("probe %s could not start: %s", self.probe_name, self.error)
            self.close()
            return
        try:
            due = time.monotonic()
            while not self.stopping.is_set() and self.error is None:
                started = time.monotonic()
                try:
                    batch = self.sample(round(started - self.t0, 3))
                except Exception as error:  # noqa: BLE001 - disable this probe, keep the others
                    self.error = db.message(error)
                    log.warning("probe %s stopped: %s", self.probe_name, self.error)
                    break
                finally:
                    self.busy_s += time.monotonic() - started
                    self.samples += 1
                self.rows.extend(batch)
                due += self.every_s
                now = time.monotonic()
                if now > due:  # the sample took longer than its interval: the next is on the grid
                    due += self.every_s * ((now - due) // self.every_s + 1)
                self.stopping.wait(due - now)
        finally:
            self.close()

    def open(self) -> None:
        """Prepare (a connection)."""

    def sample(self, t: float) -> list[dict]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what :meth:`open` took."""

    def cost(self) -> dict:
        return {"name": self.probe_name, "every_s": self.every_s, "samples": self.samples,
                "busy_s": round(self.busy_s, 4)}


class _SqlSchedule(_Schedule):
    """A SQL probe on its own connection (it gives up quickly rather than become part of the experiment)."""

    def __init__(self, item: Probe, conninfo: str, t0: float, stop: threading.Event):
        super().__init__(item.name, item.every_s, t0, stop)
        self.item = item
        self.conninfo = conninfo
        self.connection: psycopg.Connection | None = None
        self.previous: dict | None = None  # the last raw row of a probe with counters

    def open(self) -> None:
        self.connection = db.connect(self.conninfo, db.PROBE)
        self.connection.execute("set lock_timeout = '200ms'; set statement_timeout = '2s'")

    def interrupt(self) -> None:
        """Cancel the statement this probe is running (from another thread)."""
        if self.connection is not None:
            self.connection.cancel_safe()

    def sample(self, t: float) -> list[dict]:
        assert self.connection is not None
        cursor = self.connection.execute(self.item.sql)
        columns = [c.name for c in cursor.description or []]
        if self.item.columns and columns:
            if len(columns) != len(self.item.columns):
                raise ValueError(f"it returns {len(columns)} columns, not {len(self.item.columns)}")
            columns = list(self.item.columns)
        rows = cursor.fetchall() if columns else []
        batch = [{"t": t, **{c: plain_value(v) for c, v in zip(columns, row)}} for row in rows]
        if not batch and self.item.name == WAIT_EVENTS.name:
            batch = [{"t": t, "wait": "idle", "backends": 0}]  # an instant with no client: drawn as such
        if self.item.counters:
            if len(batch) != 1:
                raise ValueError(f"a probe with counters returns one row, not {len(batch)}")
            batch, self.previous = [per_second(self.previous, batch[0], self.item.counters)], batch[0]
        return batch

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()

    def cost(self) -> dict:
        return {**super().cost(), "reads_lock_table": self.item.reads_lock_table}


class Sampler:
    """Runs each probe on its own schedule until stopped; a probe that fails is disabled and reported."""

    def __init__(self, conninfo: str, probes: list[Probe]):
        self.conninfo = conninfo
        self.probes = list(probes)
        self._stop = threading.Event()
        self._extra: list[_Schedule] = []
        self._threads: list[_Schedule] = []
        self._drained: dict[str, int] = {}

    def add(self, schedule: _Schedule) -> None:
        """A probe that is not SQL (the cpu probe), started with the others."""
        self._extra.append(schedule)

    def start(self, t0: float) -> Sampler:
        self._threads = [_SqlSchedule(p, self.conninfo, t0, self._stop) for p in self.probes]
        for schedule in self._extra:
            schedule.t0, schedule.stopping = t0, self._stop
        self._threads += self._extra
        self._drained = {thread.probe_name: 0 for thread in self._threads}
        for thread in self._threads:
            thread.start()
        return self

    @property
    def samples(self) -> dict[str, list[dict]]:
        return {thread.probe_name: thread.rows for thread in self._threads}

    @property
    def errors(self) -> dict[str, str]:
        return {thread.probe_name: thread.error for thread in self._threads if thread.error}

    def costs(self) -> list[dict]:
        """Each probe's interval, samples taken and time spent taking them (its cost to the run)."""
        return [thread.cost() for thread in self._threads]

    def drain(self) -> dict[str, list[dict]]:
        """Samples taken since the last call (for the live chart, read from the caller's thread)."""
        fresh = {}
        for thread in self._threads:
            count = len(thread.rows)  # appended to by one thread, read here: a prefix is always whole
            if count > self._drained[thread.probe_name]:
                fresh[thread.probe_name] = thread.rows[self._drained[thread.probe_name]:count]
                self._drained[thread.probe_name] = count
        return fresh

    def signal_stop(self) -> None:
        """Tell every probe to stop after its current sample (returns at once)."""
        self._stop.set()

    def stop(self) -> dict[str, list[dict]]:
        """Stop every probe and return what each sampled (a probe still busy after 5 s is cancelled, and said)."""
        self._stop.set()
        deadline = time.monotonic() + 5
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for thread in self._threads:
            if thread.is_alive():
                if isinstance(thread, _SqlSchedule):
                    thread.interrupt()
                thread.join(timeout=2)
                log.warning("probe %s was still sampling when the run ended%s", thread.probe_name,
                            "" if not thread.is_alive() else "; left to end on its own")
        return {name: list(rows) for name, rows in self.samples.items()}


def plain_value(value):
    """JSON-friendly values (Decimal, datetime, numpy numbers, ...) for the run record.

    >>> from decimal import Decimal
    >>> plain_value(Decimal("20000")), plain_value(Decimal("2.5")), plain_value(None)
    (20000, 2.5, None)
    """
    if value is None or type(value) in (bool, int, float, str):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return int(number) if number.is_integer() and abs(number) < 2**53 else number
