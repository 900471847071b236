"""From what a pgbench run left behind to its :class:`~labkit.records.Run` record: pure logic, no I/O.

:mod:`labkit.runner` collects the outputs (:class:`Outputs`); :func:`record` turns them into
the record. Tested on real pgbench output recorded in ``tests/data/pgbench``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from . import cpu, pgbench, phases
from .probes import CPU, HELD_BY
from .records import Run


@dataclass(frozen=True)
class Context:
    """What labkit knows about a run before it starts."""

    notebook: str
    profile: str
    server: dict  # backend, version, settings
    started_at: str
    argv: tuple[str, ...]  # pgbench's arguments (no server, no database: those are in its environment)


@dataclass
class Outputs:
    """What a finished (or interrupted) pgbench process left behind."""

    stdout: str
    stderr: str  # what is left once the progress lines are taken out
    progress: list[pgbench.Progress]
    wall_s: float
    transaction_log: Any = None  # a DataFrame from pgbench.log_frame, or None
    samples: dict[str, list[dict]] = field(default_factory=dict)  # probe -> rows with t from the process start
    probe_errors: dict[str, str] = field(default_factory=dict)
    interrupted: bool = False
    exit_code: int | None = 0
    probe_costs: list[dict] = field(default_factory=list)  # each probe's interval, samples and time spent
    cpus: float = 0.0  # the cores this machine (or container) gives the run
    started_epoch: float | None = None  # Unix time pgbench was started (the probes' clock zero)
    ended_epoch: float | None = None  # Unix time pgbench closed its output (it exited), as its reader saw it
    progress_arrivals: list[float] = field(default_factory=list)  # Unix time each progress line came


def record(spec: pgbench.Spec, context: Context, outputs: Outputs) -> Run:
    """The run record of ``spec`` from its ``outputs``: figures over the steady phase, the start and tail apart."""
    summary = pgbench.parse_summary(outputs.stdout)
    problems = pgbench.parse_errors(outputs.stderr)
    points = [vars(p) for p in outputs.progress]
    log = outputs.transaction_log
    rate = spec.sampling_rate or 1.0
    zero, connected_s = _zero(spec, summary, outputs)
    offset = _probe_offset(zero, outputs)
    logged = log is not None and not log.empty  # --no-log, or an interrupt that lost pgbench's buffered log
    # each client's last transaction: known only from a log of every transaction
    ends = pgbench.client_ends(log, zero) if zero is not None and logged and rate == 1 else {}
    if ends and spec.transactions:  # a -t run's steady phase ends when a client that did all its work ends
        done = pgbench.client_counts(log)
        ends = {client: end for client, end in ends.items() if done.get(client, 0) >= spec.transactions}
    known_ends = ([points[-1]["t"]] if points else []) + ([max(ends.values())] if ends else [])
    if zero is not None and logged:  # a sampled log's last transaction: the run went on at least that long
        known_ends.append(float(log["end_s"].max()) - zero)
    # a log of every transaction knows the last one (not an interrupted run's: it can lose its last lines)
    every_transaction = zero is not None and logged and rate == 1 and not outputs.interrupted
    if zero is not None and not every_transaction:  # the last transaction unknown: pgbench's exit bounds it
        exited = outputs.ended_epoch if outputs.ended_epoch is not None else (
            None if outputs.started_epoch is None else outputs.started_epoch + outputs.wall_s)
        if exited is not None:
            known_ends.append(exited - zero)
    end_s = max(known_ends) if known_ends else max(0.0, outputs.wall_s - offset)
    jobs = _jobs(context.argv, spec)
    parts = phases.phases_of(connected_s=connected_s, planned_end_s=spec.duration_s, end_s=end_s, client_ends=ends,
                             interrupted=outputs.interrupted)
    fine: list[dict] = []
    fine_width = None
    whole_latency: dict = {}
    if zero is not None and logged:
        fine_width = 0.1
        fine = [vars(b) for b in pgbench.bin_log(log, zero, fine_width, sampling_rate=rate, end_s=zero + parts.end_s)]
        whole_latency = dict(pgbench.latency_figures(log))
    elif summary.latency_avg_ms is not None:
        whole_latency = {"avg": summary.latency_avg_ms, "stddev": summary.latency_stddev_ms}
    transactions = summary.transactions
    if transactions is None and points:
        transactions = int(sum(p["tps"] * (b - a) for a, b, p in phases.progress_intervals(points)))
    whole_tps = summary.tps
    if whole_tps is None and points:
        whole_tps = phases.tps_over(phases.progress_intervals(points))
    steady = _steady_figures(parts, points, log if logged else None, zero, rate)
    stalls = [vars(s) for s in pgbench.find_stalls([(p["t"], p["tps"]) for _, _, p in phases.in_part(points, parts)])]
    # Probes are timed from pgbench's start (the process); its zero comes a few ms later.
    samples = {name: [{**row, "t": round(row["t"] - offset, 3)} for row in rows]
               for name, rows in outputs.samples.items() if rows or name != HELD_BY}  # held_by: only when it was
    tps = steady.get("tps") if steady.get("tps") is not None else whole_tps
    latency = steady.get("latency_ms") or whole_latency
    return Run(
        name=spec.name, notebook=context.notebook, profile=context.profile, started_at=context.started_at,
        server=context.server, scripts=[vars(s) for s in spec.scripts], clients=spec.clients,
        jobs=jobs, duration_s=spec.duration_s, transactions_per_client=spec.transactions,
        mode=spec.mode, argv=list(context.argv), wall_s=round(outputs.wall_s, 3),
        overrun_s=parts.tail_s if spec.duration_s else None, tps=tps, latency_ms=latency,
        transactions=transactions, failures=summary.failed or 0,
        serialization_failures=summary.serialization_failures, deadlock_failures=summary.deadlock_failures,
        retried=summary.retried, retries=summary.retries,
        aborted_clients=problems.aborted_clients, errors=list(problems.errors), interrupted=outputs.interrupted,
        per_second=points, fine=fine, fine_width_s=fine_width, stalls=stalls, probes=samples,
        statements=[vars(s) for s in summary.statements],
        phases=parts.to_dict(), steady=steady,
        whole={"tps": whole_tps, "transactions": transactions, "latency_ms": whole_latency},
        extra=_extra(jobs, outputs, samples, parts),
    )


def _jobs(argv: tuple[str, ...], spec: pgbench.Spec) -> int:
    """The -j pgbench ran with, read from its own command line (not recomputed from the machine now)."""
    if "-j" in argv and argv.index("-j") + 1 < len(argv):
        with contextlib.suppress(ValueError):
            return int(argv[argv.index("-j") + 1])
    return spec.jobs or 1


def _zero(spec: pgbench.Spec, summary: pgbench.Summary, outputs: Outputs) -> tuple[float | None, float]:
    """The run's time zero (pgbench's) as a Unix time (None: unknown), and when its clients had all connected.

    Progress lines carry pgbench's own clock (seconds since zero): the line that came soonest
    after it was written gives zero best (stderr is unbuffered; a line can only come late).
    Without progress lines (a run shorter than a second), zero comes from the transaction log:
    its first transaction began once every client had connected, which holds only for a log of
    every transaction of a run without ``-R`` (whose latencies count from the schedule).
    """
    connected = summary.initial_connection_ms / 1000 if summary.initial_connection_ms is not None else None
    log = outputs.transaction_log
    exact_log = log is not None and not log.empty and (spec.sampling_rate or 1.0) == 1 and spec.rate is None
    first = pgbench.log_start(log) if exact_log else None
    zero = None
    if outputs.progress and len(outputs.progress_arrivals) == len(outputs.progress):
        zero = min(arrived - point.t for point, arrived in zip(outputs.progress, outputs.progress_arrivals))
    elif first is not None and connected is not None:
        zero = first - connected
    if connected is None:  # no summary (an interrupted run): from the log, where it can tell
        if first is not None and zero is not None:
            connected = max(0.0, first - zero)
        else:  # pgbench prints its first progress line once its clients are connected: at most that
            connected = outputs.progress[0].t if outputs.progress and outputs.progress[0].t > 1 else 0.0
    return zero, connected


def _probe_offset(zero: float | None, outputs: Outputs) -> float:
    """Seconds from pgbench's process start (the probes' clock) to its zero: its start-up and setup connection."""
    if zero is None or outputs.started_epoch is None:
        return 0.0
    return round(min(max(0.0, zero - outputs.started_epoch), outputs.wall_s), 3)


def _steady_figures(parts: phases.Phases, points: list[dict], log, zero: float | None, rate: float) -> dict:
    """tps, latency and failures over the steady phase: from the transaction log, else from the progress lines."""
    if parts.steady_s <= 0:
        return {}
    if zero is not None and log is not None:
        figures = pgbench.window_figures(log, zero + parts.steady_from_s, zero + parts.steady_to_s, sampling_rate=rate)
        return {**figures, "tps": None if figures["tps"] is None else round(figures["tps"], 3)}
    inside = phases.in_part(points, parts)
    if not inside:
        return {}
    seconds = sum(end - start for start, end, _ in inside)
    weighted = [(end - start) * p["tps"] * p["lat_ms"] for start, end, p in inside if p.get("lat_ms") is not None]
    count = sum((end - start) * p["tps"] for start, end, p in inside if p.get("lat_ms") is not None)
    return {
        "seconds": round(seconds, 3),
        "transactions": round(sum((end - start) * p["tps"] for start, end, p in inside)),
        "tps": phases.tps_over(inside),
        "failures": sum(p.get("failed") or 0 for _, _, p in inside),
        "latency_ms": {"avg": round(sum(weighted) / count, 3)} if count else {},
        "source": "progress lines",
    }


def _extra(jobs: int, outputs: Outputs, samples: dict[str, list[dict]], parts: phases.Phases) -> dict:
    """What the runner measured beside pgbench: the probes' own cost, the CPU split, probe failures."""
    extra: dict = {}
    if outputs.probe_errors:
        extra["probe_errors"] = dict(outputs.probe_errors)
    if outputs.probe_costs:
        extra["probe_costs"] = list(outputs.probe_costs)
    blind = blind_probes(samples, outputs.probe_costs)
    if blind:
        extra["probe_notes"] = blind
    # a row covers the interval before it
    steady = [row for row in samples.get(CPU, []) if parts.part(row["t"] - cpu.EVERY_S / 2) == "steady"]
    split = cpu.figures(steady or samples.get(CPU, []), jobs, outputs.cpus)
    if split:
        extra["cpu"] = split
    return extra


def blind_probes(samples: dict[str, list[dict]], costs: list[dict]) -> dict[str, str]:
    """A sentence for each probe that read nothing but zeros (or no row): what it could not see.

    A probe samples instants: an event shorter than its interval (a row lock held for a
    fraction of a millisecond) falls between two samples. "0 in every sample" is then "nothing
    lasting long enough to be caught", not "never".

    >>> blind_probes({"waiting": [{"t": 0.25, "locks": 0}, {"t": 0.5, "locks": 0}]},
    ...              [{"name": "waiting", "every_s": 0.25, "samples": 2}])["waiting"]
    "probe 'waiting' read 0 in all 2 samples, one every 0.25 s: an event shorter than that (a lock wait of a few milliseconds) can fall between two samples, so this says it was rare or short, not that it never happened. A cumulative counter (pg_stat_* views) or the server log (log_lock_waits) counts what sampling misses."
    """
    notes: dict[str, str] = {}
    for cost in costs:
        name = str(cost.get("name"))
        if name in (CPU, HELD_BY, "work") or not cost.get("samples"):
            continue
        rows = samples.get(name, [])
        numbers = [value for row in rows for key, value in row.items()
                   if key != "t" and isinstance(value, (int, float)) and not isinstance(value, bool)]
        if numbers and any(numbers):
            continue
        if rows and not numbers:
            continue  # text rows (wait event names): something was seen
        notes[name] = (f"probe {name!r} read {'0' if rows else 'no row'} in all {cost['samples']} samples, one every "
                       f"{cost['every_s']:g} s: an event shorter than that (a lock wait of a few milliseconds) can "
                       "fall between two samples, so this says it was rare or short, not that it never happened. "
                       "A cumulative counter (pg_stat_* views) or the server log (log_lock_waits) counts what "
                       "sampling misses.")
    return notes


def aborted_sentence(run: Run) -> str:
    """What a student is told when some clients aborted (their first error), the run kept.

    >>> aborted_sentence(Run("r", "nb", "ci", "now", clients=4, aborted_clients=1, errors=["ERROR: x"]))
    'r: 1 of 4 clients aborted (ERROR: x); the tps counts the transactions of the 3 that went on.'
    """
    first = f" ({run.errors[0]})" if run.errors else ""
    return (f"{run.name}: {run.aborted_clients} of {run.clients} clients aborted{first}; the tps counts the "
            f"transactions of the {run.clients - (run.aborted_clients or 0)} that went on.")


def failure(outputs: Outputs, run: Run) -> str | None:
    """Why a run failed (pgbench's own first error), or None when it did work or was interrupted.

    A run that ended with an error but completed transactions (some clients aborted) is kept:
    its record lists the errors. Without one, the exit code says what happened: on Windows a
    code from 0x80000000 up is an exception status (NTSTATUS), i.e. a crash, written in hex as
    Windows documents it; on POSIX a negative code is the signal that killed it.

    >>> crashed = Outputs(stdout="", stderr="", progress=[], wall_s=1.0, exit_code=3221225477)
    >>> failure(crashed, Run("r", "nb", "ci", "now"))
    'pgbench crashed (exit code 0xC0000005: access violation)'
    """
    if outputs.interrupted or outputs.exit_code == 0 or run.transactions:
        return None
    if run.errors:
        return run.errors[0]
    code = outputs.exit_code
    if code is not None and code >= 0x80000000:
        status = f"0x{code:08X}"
        if code == 0xC000013A:  # STATUS_CONTROL_C_EXIT: not a crash
            return f"pgbench was stopped by Ctrl+C or its console closing (exit code {status})"
        name = _WINDOWS_CRASHES.get(code)
        return f"pgbench crashed (exit code {status}{': ' + name if name else ''})"
    if code is not None and code < 0:
        import signal

        with contextlib.suppress(ValueError):
            return f"pgbench was killed by signal {signal.Signals(-code).name}"
    return f"pgbench exited with code {code}"


# The NTSTATUS codes a crashed Windows program most often ends with (ntstatus.h).
_WINDOWS_CRASHES = {0xC0000005: "access violation", 0xC00000FD: "stack overflow", 0xC0000409: "stack buffer overrun",
                    0xC0000017: "out of memory", 0xC0000135: "a DLL it needs was not found"}


def no_progress(run: Run) -> str | None:
    """What a student is told when a timed run completed no transaction at all (None: it did some, or was stopped).

    Its figures would be empty, and every cell that reads them would fail further down.

    >>> print(no_progress(Run("plain", "nb", "ci", "now", clients=256, duration_s=4, transactions=0)))
    Run 'plain' completed no transaction in its 4 s with 256 clients: each client was still waiting when it ended, on a lock held elsewhere (the run's wait events say which) or for a CPU on a machine too busy for this many clients. Its record is saved (lab.last_run). Run it again when the machine is quieter, or with fewer clients or a longer run.
    """
    if run.transactions or run.interrupted or not run.duration_s or run.errors:
        return None
    return (f"Run {run.name!r} completed no transaction in its {run.duration_s:g} s with {run.clients} clients: each "
            "client was still waiting when it ended, on a lock held elsewhere (the run's wait events say which) or "
            "for a CPU on a machine too busy for this many clients. Its record is saved (lab.last_run). Run it again "
            "when the machine is quieter, or with fewer clients or a longer run.")


def work_figures(before: float, after: float, run: Run) -> dict:
    """Goodput beside tps: work per second over the steady phase, and the share of useful transactions.

    ``before`` and ``after`` are the work counter just before pgbench started and once it ended;
    the work probe's samples (one a second) give the counter in between, read at the steady
    phase's two ends (linearly between samples). Where they cannot (no samples, an older
    record), the whole run on pgbench's own clock: its transactions over its tps. ``useful`` is
    work over transactions for the whole run: both are exact counts there.

    >>> run = Run("r", "nb", "ci", "now", tps=200.0, transactions=1000, duration_s=4,
    ...           phases={"connected_s": 0.1, "steady_from_s": 1.0, "steady_to_s": 4.0, "end_s": 4.2},
    ...           steady={"transactions": 600}, probes={"work": [{"t": 1.0, "work": 110}, {"t": 2.0, "work": 130},
    ...                                                         {"t": 3.0, "work": 150}, {"t": 4.0, "work": 170}]})
    >>> work_figures(100, 174, run)
    {'work': 74, 'useful': 0.074, 'goodput': 20.0, 'goodput_basis': 'steady phase'}
    """
    done = after - before
    figures: dict = {"work": int(done) if float(done).is_integer() else done}
    if run.transactions:  # a share of counts, exact over the whole run (the samples' timing would blur it)
        figures["useful"] = round(done / run.transactions, 4)
    steady = _steady_work(before, after, run)
    if steady is not None:
        work, seconds = steady
        figures["goodput"] = round(work / seconds, 1)
        figures["goodput_basis"] = "steady phase"
        return figures
    whole_tps = run.whole.get("tps", run.tps) if run.whole else run.tps
    if whole_tps and run.transactions:
        seconds = run.transactions / whole_tps
    else:
        seconds = run.duration_s or run.wall_s or 0
    if seconds:
        figures["goodput"] = round(done / seconds, 1)
    figures["goodput_basis"] = "whole run"
    return figures


def _steady_work(before: float, after: float, run: Run) -> tuple[float, float] | None:
    """The work done over the steady phase and its length, from the work probe's samples."""
    from .probes import WORK

    parts = run.phase_parts()
    rows = [(row["t"], row[WORK]) for row in run.probes.get(WORK) or [] if isinstance(row.get(WORK), (int, float))]
    if parts is None or parts.steady_s <= 0 or not rows:
        return None
    points = sorted([(parts.connected_s, before), *rows, (parts.end_s, after)])
    start, end = _at(points, parts.steady_from_s), _at(points, parts.steady_to_s)
    if start is None or end is None:
        return None
    return end - start, parts.steady_s


def _at(points: list[tuple[float, float]], t: float) -> float | None:
    """The counter at ``t``, linearly between the samples either side (None outside them)."""
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return None
