"""Probes: SQL sampled beside a pgbench run, on the run's own time axis.

A probe is a name, a query and an interval. The sampler runs every probe on its own
connection in a background thread; each row it returns is stored with ``t``, the
seconds since the run started. The wait-event probe (every 250 ms) is on by default::

    lab.pgbench(script, probes=[labkit.probe("pending", "select pending_pages from pgstatginindex('i')")])
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

import psycopg

from . import db
from .queries import query


@dataclass(frozen=True)
class Probe:
    """A query sampled every ``every_s`` seconds during a run."""

    name: str
    sql: str
    every_s: float = 1.0


HELD_BY = "held_by"  # every client of the run waits for a lock held outside it: by whom


def held_by_probe(application_name: str) -> Probe:
    """Who outside the run holds the lock every one of its clients waits for (a row only then)."""
    if not re.fullmatch(r"[a-z0-9-]+", application_name):
        raise ValueError(f"not a run's application name: {application_name!r}")

    return Probe(HELD_BY, query("held_by").replace("{application_name}", application_name), 1.0)


def probe(name: str, sql: str, every: float = 1.0) -> Probe:
    """A probe named ``name`` that runs ``sql`` every ``every`` seconds."""
    return Probe(name, sql, float(every))


WAIT_EVENTS = Probe("waits", query("wait_events").replace("{probe}", db.PROBE), 0.25)

# The name of the probe that samples a run's work counter (see ``work=`` of Lab.pgbench).
WORK = "work"


class Sampler:
    """Samples probes in a thread until stopped; errors disable a probe and are reported."""

    def __init__(self, conninfo: str, probes: list[Probe]):
        self.conninfo = conninfo
        self.probes = list(probes)
        self.samples: dict[str, list[dict]] = {p.name: [] for p in self.probes}
        self.errors: dict[str, str] = {}
        self._drained: dict[str, int] = {p.name: 0 for p in self.probes}
        self.busy_s = 0.0  # time spent querying (the probes' own cost)
        self.queries = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def start(self, t0: float) -> Sampler:
        if not self.probes:
            return self
        self._t0 = t0
        self._thread = threading.Thread(target=self._loop, name="labkit-probes", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        try:
            connection = db.connect(self.conninfo, db.PROBE)
        except psycopg.Error as error:
            self.errors["connection"] = db.message(error)
            return
        with connection:
            # A probe must never become part of the experiment: it gives up quickly.
            connection.execute("set lock_timeout = '200ms'; set statement_timeout = '2s'")
            due = {p.name: 0.0 for p in self.probes}
            while not self._stop.is_set():
                now = time.monotonic()
                for item in self.probes:
                    if item.name in self.errors or now < due[item.name]:
                        continue
                    due[item.name] = now + item.every_s
                    self._sample(connection, item)
                next_due = min((due[p.name] for p in self.probes if p.name not in self.errors), default=None)
                if next_due is None:
                    return
                self._stop.wait(max(0.0, next_due - time.monotonic()))

    def _sample(self, connection: psycopg.Connection, item: Probe) -> None:
        started = time.monotonic()
        try:
            cursor = connection.execute(item.sql)
            columns = [c.name for c in cursor.description or []]
            rows = cursor.fetchall() if columns else []
        except psycopg.Error as error:
            self.errors[item.name] = db.message(error)
            return
        finally:
            self.busy_s += time.monotonic() - started
            self.queries += 1
        t = round(started - self._t0, 3)
        batch = [{"t": t, **{c: plain_value(v) for c, v in zip(columns, row)}} for row in rows]
        if not batch and item is WAIT_EVENTS:
            batch = [{"t": t, "wait": "idle", "backends": 0}]
        self.samples[item.name].extend(batch)

    def drain(self) -> dict[str, list[dict]]:
        """Samples taken since the last call (for the live chart, read from the caller's thread)."""
        fresh = {}
        for name, rows in self.samples.items():
            count = len(rows)
            if count > self._drained[name]:
                fresh[name] = rows[self._drained[name]:count]
                self._drained[name] = count
        return fresh

    def stop(self) -> dict[str, list[dict]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.samples


def plain_value(value):
    """JSON-friendly values (Decimal, datetime, ...) for the run record.

    >>> from decimal import Decimal
    >>> plain_value(Decimal("20000")), plain_value(Decimal("2.5")), plain_value(None)
    (20000, 2.5, None)
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return int(number) if number.is_integer() and abs(number) < 2**53 else number
