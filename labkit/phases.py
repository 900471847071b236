"""A run's phases: its start, its steady part, and its tail after the planned end (pure logic, no I/O).

pgbench 18 keeps one clock for a run (``src/bin/pgbench/pgbench.c`` at REL_18: ``main`` and
``threadRun``). Time zero is taken just before the threads connect their clients; the
summary's "initial connection time" is when the first transaction could begin; ``-T`` ends
the run at zero + T, connection time included; progress lines count from zero, and the first
comes only once the clients are connected (a run whose clients take 2.2 s to connect prints
its first line at 2.2 s). A transaction still running at ``-T`` is finished and counted.

So a run has three parts:

- the **start**: until every client is connected and a first full second has passed (the
  first second warms caches and plans; a partial second reads as a stall);
- the **steady** phase: from there to the planned end (``-T``), or, for a ``-t`` run, until the
  first client finished its transactions (after that fewer clients run);
- the **tail**: after that, while the last transactions finish, with fewer clients.

Aggregates (tps, latency, waits, stalls) are taken over the steady phase; the start and the
tail are reported on their own.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

WARM_UP_S = 1.0  # the first full second after connecting is part of the start
STILL_RUNNING_S = 0.1  # a client counts as running in the tail if it ends this long after the steady end
EPSILON = 1e-6


@dataclass(frozen=True)
class Phases:
    """Where a run's parts begin and end, in seconds on pgbench's clock."""

    connected_s: float  # every client connected: the first transaction may begin
    steady_from_s: float
    steady_to_s: float
    end_s: float  # the last transaction ended (without a log of every one: the last progress line or pgbench's exit)
    planned_end_s: float | None = None  # -T; None for a -t run
    clients_after: int | None = None  # clients still running 0.1 s into the tail (None: no transaction log)
    note: str | None = None  # why the steady phase is not what it should be (a run too short)

    @property
    def steady_s(self) -> float:
        return round(max(0.0, self.steady_to_s - self.steady_from_s), 3)

    @property
    def tail_s(self) -> float:
        return round(max(0.0, self.end_s - self.steady_to_s), 3)

    def part(self, t: float) -> str:
        """``start``, ``steady`` or ``tail``: where an instant ``t`` falls.

        >>> p = Phases(0.5, 1.0, 4.0, 5.5, 4.0)
        >>> [p.part(t) for t in (0.2, 1.0, 3.9, 4.0, 4.5)]
        ['start', 'steady', 'steady', 'steady', 'tail']
        """
        if t < self.steady_from_s - EPSILON:
            return "start"
        if t > self.steady_to_s + EPSILON:
            return "tail"
        return "steady"

    def interval_part(self, start: float, end: float) -> str:
        """Where an interval ``(start, end]`` falls: ``steady`` only when it lies wholly inside the steady phase."""
        if end <= self.steady_from_s + EPSILON:
            return "start"
        if start >= self.steady_to_s - EPSILON:
            return "tail"
        if start >= self.steady_from_s - EPSILON and end <= self.steady_to_s + EPSILON:
            return "steady"
        return "start" if start < self.steady_from_s else "tail"

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(steady_s=self.steady_s, tail_s=self.tail_s)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Phases:
        known = {"connected_s", "steady_from_s", "steady_to_s", "end_s", "planned_end_s", "clients_after", "note"}
        return cls(**{key: value for key, value in data.items() if key in known})

    def sentence(self) -> str:
        """The run's parts in one line, as a student reads them.

        >>> print(Phases(0.63, 1.0, 4.0, 6.1, 4.0, clients_after=3).sentence())
        start 0–1.0 s (clients connected at 0.63 s); steady 1.0–4.0 s; after the planned end: 2.1 s, 3 clients still running.
        """
        text = (f"start 0–{self.steady_from_s:.1f} s (clients connected at {self.connected_s:.2f} s); "
                f"steady {self.steady_from_s:.1f}–{self.steady_to_s:.1f} s")
        if self.note:
            text += f" ({self.note})"
        if self.tail_s >= 0.05:
            where = "after the planned end" if self.planned_end_s is not None else "after the first client finished"
            running = "" if self.clients_after is None else (
                f", {self.clients_after} client{'s' * (self.clients_after != 1)} still running")
            text += f"; {where}: {self.tail_s:.1f} s{running}"
        return text + "."


def phases_of(*, connected_s: float, planned_end_s: float | None, end_s: float,
              client_ends: dict[int, float] | None = None, progress_s: float = 1.0,
              interrupted: bool = False) -> Phases:
    """The phases of a run from what it left behind.

    ``connected_s``: pgbench's initial connection time; ``planned_end_s``: ``-T`` (None for
    ``-t``); ``end_s``: when its last transaction ended; ``client_ends``: each client's last
    transaction end (from the transaction log), which gives the ``-t`` run's steady end and the
    clients still running in the tail. Progress lines are ``progress_s`` apart after the first.

    >>> phases_of(connected_s=2.2135, planned_end_s=4, end_s=4.08).steady_from_s
    3.0
    >>> phases_of(connected_s=0.004, planned_end_s=3, end_s=5.02, client_ends={0: 5.0, 1: 5.02, 2: 3.01}).clients_after
    2
    """
    steady_from = max(WARM_UP_S, math.ceil(connected_s / progress_s - EPSILON) * progress_s)
    if planned_end_s is not None:
        steady_to = float(planned_end_s)
    elif client_ends:
        steady_to = min(client_ends.values())
    else:
        steady_to = end_s
    if interrupted or planned_end_s is None:
        steady_to = min(steady_to, end_s)  # an interrupted run ends before its planned end
    note = None
    if steady_to - steady_from < progress_s - EPSILON:
        # Too short for a full second after the start: take what there is after connecting.
        steady_from = min(connected_s, steady_to)
        note = "too short for a full second after the start: its figures include the first second"
    after = None
    if client_ends:
        after = sum(1 for end in client_ends.values() if end > steady_to + STILL_RUNNING_S)
    return Phases(round(connected_s, 3), round(steady_from, 3), round(steady_to, 3), round(max(end_s, steady_to), 3),
                  None if planned_end_s is None else float(planned_end_s), after, note)


def progress_intervals(points: list[dict]) -> list[tuple[float, float, dict]]:
    """Each progress line as the interval it covers: ``(start, end, point)``.

    pgbench's first line covers everything since zero, connection time included, and a line
    can come early or late; each covers the time since the previous one.

    >>> [(a, b) for a, b, _ in progress_intervals([{"t": 2.2}, {"t": 3.0}, {"t": 4.0}])]
    [(0.0, 2.2), (2.2, 3.0), (3.0, 4.0)]
    """
    intervals = []
    previous = 0.0
    for point in points:
        intervals.append((previous, point["t"], point))
        previous = point["t"]
    return intervals


def in_part(points: list[dict], phases: Phases, part: str = "steady") -> list[tuple[float, float, dict]]:
    """The progress lines (as intervals) that lie in one part of the run."""
    return [(start, end, point) for start, end, point in progress_intervals(points)
            if phases.interval_part(start, end) == part]


def tps_over(intervals: list[tuple[float, float, dict]]) -> float | None:
    """Transactions per second over progress intervals, each weighted by the time it covers.

    >>> tps_over(progress_intervals([{"t": 2.2, "tps": 0.0}, {"t": 3.0, "tps": 2702.1}, {"t": 4.0, "tps": 2759.7}])[1:])
    2734.1
    """
    seconds = sum(end - start for start, end, _ in intervals)
    if seconds <= 0:
        return None
    return round(sum((end - start) * point["tps"] for start, end, point in intervals) / seconds, 1)
