"""Running pgbench: the thin layer that waits, around the pure logic of :mod:`labkit.pgbench`.

One run at a time per kernel. While pgbench runs, each progress line goes to an *observer*
(the live chart in a notebook, a printer on the command line) and the probes sample the
server. An interrupt stops pgbench at once (:func:`labkit.processes.interrupt`), terminates
the backends it left (found by the run's application_name), saves what was measured as an
interrupted run, and re-raises. A pgbench whose kernel dies is killed by the OS where it can
(Linux, Windows) and by the watchdog or the next ``labkit.start()`` everywhere.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import psycopg

from . import cpu, db, limits, pgbench, processes, run_record, serverlog
from . import perf as perf_module
from .config import ENCODING
from .errors import LabkitError, RunFailed, UsageError
from .probes import CPU, HELD_BY, HELD_BY_PROBE, WORK, Probe, Sampler
from .profiles import machine_size
from .queries import query
from .records import Run, now_iso
from .registry import ProcessRegistry

log = logging.getLogger(__name__)
OWN_PROBES = (HELD_BY, CPU)  # every run has them
_ONE_RUN = threading.Lock()


class Interrupted(KeyboardInterrupt):
    """An interrupted run: pgbench stopped, its backends ended; ``run`` is what was measured (saved), or None."""

    def __init__(self, message: str, run: Run | None):
        super().__init__(message)
        self.run = run


class Observer(Protocol):
    """What hears about a run while it happens (the live chart, the command line's printer)."""

    def progress(self, point: pgbench.Progress, line: str) -> None:
        """One progress line of pgbench (one per second)."""

    def samples(self, fresh: dict[str, list[dict]]) -> None:
        """Probe samples taken since the last call."""


def _warn(text: str) -> None:
    """A UserWarning shown at the student's own line (the first frame outside labkit), once per cell run."""
    import sys
    from types import FrameType

    level = 1
    frame: FrameType | None = sys._getframe(0)
    while frame is not None and frame.f_code.co_filename.startswith(_LABKIT_DIR):
        frame, level = frame.f_back, level + 1
    warnings.warn(text, UserWarning, stacklevel=level)


_LABKIT_DIR = str(Path(__file__).resolve().parent)


def free_connections(conninfo: str) -> int:
    """Connections an ordinary client can still open on the server."""
    with db.connect(conninfo) as connection:
        in_use, maximum, reserved = db.row(connection, query("connections"))
    return maximum - reserved - in_use


def work_probe(sql: str) -> Probe:
    """The probe that samples a work counter (one number) once a second during a run.

    The query runs as it was written (a trailing comment or semicolon included: it is never
    pasted inside other SQL); its one column is stored as ``work``.
    """
    return Probe(WORK, sql, 1.0, columns=(WORK,))


WORK_AFTER_TIMEOUT_S = 30  # the count after a run, while Ctrl+C is held: a lock on its table must not hang the kernel


def measure_work(conninfo: str, sql: str, timeout_s: float | None = None) -> float:
    """The work counter now: one number, e.g. ``select count(*) from done`` (``timeout_s``: its statement_timeout)."""
    try:
        with db.connect(conninfo) as connection:
            if timeout_s is not None:
                connection.execute("select set_config('statement_timeout', %s, false)", [f"{int(timeout_s * 1000)}"])
            cursor = connection.execute(sql)
            row = cursor.fetchone() if cursor.description else None
    except psycopg.Error as error:
        raise UsageError(f"The work query failed: {db.message(error)}. "
                         "It must return one number, e.g. select count(*) from done.") from None
    if cursor.description is not None and len(cursor.description) != 1:
        raise UsageError(f"The work query returns {len(cursor.description)} columns: it must return one number, "
                         "e.g. select count(*) from done.")
    value = row[0] if row else None
    try:
        return float(value)  # type: ignore[arg-type]  # None and text are refused below
    except (TypeError, ValueError):
        raise UsageError(f"The work query returned {value!r}, not a number: it must count work done so far.") from None


def wait_backends_gone(conninfo: str, application_name: str, timeout_s: float = 5.0) -> bool:
    """Wait until the run's backends have exited (and so flushed their statistics); False, said, if they did not."""
    deadline = time.monotonic() + timeout_s
    left = None
    try:
        with db.connect(conninfo) as connection:
            while time.monotonic() < deadline:
                left = db.one(connection, query("run_backends"), {"application_name": application_name})
                if not left:
                    return True
                time.sleep(0.05)
    except psycopg.Error as error:
        _warn(f"Could not check that the run's backends have exited ({db.message(error)}): statistics "
              "read right now may miss the end of the run.")
        return False
    _warn(f"{left} backend(s) of the run were still there after {timeout_s:.0f} s: statistics read "
          "right now (pg_stat_*, lab.check) may miss what they have not flushed yet.")
    return False


@dataclass(frozen=True)
class Target:
    """Where a run goes: what the runner needs from the server, and nothing else."""

    conninfo: str  # the lab database, for probes and checks
    environment: dict[str, str]  # the same, as libpq variables for pgbench
    pgbench: Path
    notebook: str
    profile: str
    server: dict  # backend, version, settings (for the record)
    registry: ProcessRegistry | None = None  # where pgbench processes are registered (for the reaper)
    postmaster_pid: int | None = None  # a local server's main process, for perf
    log_file: Path | None = None  # the server's log, where labkit can read it (the lock waits it logged)


def _run_folder() -> Path:
    """A new folder for one run's pgbench logs, in the system's temporary folder; a clear error where none can be made."""
    try:
        return Path(tempfile.mkdtemp(prefix="labkit-run-"))
    except OSError as error:
        raise UsageError(f"labkit could not make a folder for the run's logs in {tempfile.gettempdir()} "
                         f"({error.strerror or error}): free some space there, or set TMPDIR (TEMP on Windows) "
                         "to a folder you can write.") from None


class PgbenchRunner:
    """Runs one :class:`~labkit.pgbench.Spec` against a :class:`Target` and returns its :class:`Run`."""

    def __init__(self, target: Target):
        self.target = target

    def run(self, spec: pgbench.Spec, *, probes: Sequence[Probe] = (), observer: Observer | None = None,
            work: str | None = None, perf: bool = False, own_probes: Sequence[str] = OWN_PROBES,
            tags: dict | None = None) -> Run:
        """Run ``spec``; ``work`` is SQL counting the work done so far (for goodput), sampled each second.

        ``tags`` are record fields set before it is saved (``repeat``, ``repeats``, ``series``).

        ``own_probes`` are labkit's probes that every run has (``held_by``, ``cpu``); the
        benchmark leaves them out to measure what each costs.

        ``perf`` records the server's processes with ``perf record -e cpu-clock`` during the run
        (``extra.perf``); where perf cannot, ``extra.perf`` says why in one line.
        """
        if not _ONE_RUN.acquire(blocking=False):
            raise UsageError("A pgbench run is already going on in this kernel: wait for it or interrupt it.")
        # Once pgbench has ended (or is being stopped), Ctrl+C waits until the record is made and saved,
        # and the run's backends are ended: an interrupt there would lose a finished run, or leave them.
        held = processes.HeldInterrupts("the run's record is made")
        try:
            run = self._measure(spec, probes, observer, work, perf, own_probes, tags, held)
        finally:
            late = held.release()
        if late:
            raise Interrupted(f"pgbench run {spec.name!r} had finished when it was interrupted: its record is saved",
                              run)
        return run

    def _measure(self, spec: pgbench.Spec, probes: Sequence[Probe], observer: Observer | None, work: str | None,
                 perf: bool, own_probes: Sequence[str], tags: dict | None, held: processes.HeldInterrupts) -> Run:
        workdir: Path | None = None
        attach: _PerfAttach | None = None
        work_before = 0.0
        try:  # from here on the kernel's run lock is let go of, whatever fails
            workdir = _run_folder()
            log_start = serverlog.position(self.target.log_file)
            chosen = [p for p in probes if p.name != WORK] + ([work_probe(work)] if work else [])
            chosen += [HELD_BY_PROBE] if HELD_BY in own_probes else []
            _check_probe_names(chosen)
            attach = self._perf_attach(spec) if perf else None
            pgbench.check_capacity(spec, free_connections(self.target.conninfo)
                                   - self._probe_connections(chosen, CPU in own_probes) - (attach is not None))
            limits.check_pgbench_clients(spec.clients, spec.threads)
            if work:
                work_before = measure_work(self.target.conninfo, work)
            run, outputs = self._run(spec, chosen, observer, workdir, held, cpu_probe=CPU in own_probes,
                                     attach=attach)
            if perf:
                run.extra["perf"] = attach.figures() if attach is not None else perf_module.figures(None, self._no_perf)
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            if attach is not None:
                attach.cleanup()
            _ONE_RUN.release()
        if work:
            try:
                after = measure_work(self.target.conninfo, work, timeout_s=WORK_AFTER_TIMEOUT_S)
                run.extra.update(run_record.work_figures(work_before, after, run))
            except UsageError as error:  # the run is kept, without its work figures
                log.warning("run %s: no work figures: %s", spec.name, error)
        # the waits the server logged (log_lock_waits): how many reached deadlock_timeout (None: no log here)
        run.extra["lock_waits_logged"] = serverlog.lock_waits(self.target.log_file, log_start)
        for key, value in (tags or {}).items():
            setattr(run, key, value)
        log.info("run %s: %s transactions, %s tps, %.1f s", spec.name, run.transactions, run.tps, outputs.wall_s)
        if outputs.interrupted:
            try:
                run.save()  # what was measured, even with no transaction done (the waits, who held the lock)
                unsaved = ""
            except LabkitError as error:  # a full disk: the interrupt is still the news, the run still the caller's
                unsaved = f" ({error})"
            raise Interrupted(f"pgbench run {spec.name!r} interrupted after {outputs.wall_s:.1f} s{unsaved}", run)
        reason = run_record.failure(outputs, run)
        if reason is not None:
            raise RunFailed(f"pgbench stopped: {reason}",
                            detail="Fix the script and run the cell again." if run.errors else outputs.stderr[-2000:])
        if run.aborted_clients:
            _warn(run_record.aborted_sentence(run))
        try:
            run.save()
        except LabkitError as error:
            error.run = run  # measured, only not on disk: the caller keeps it (lab.last_run) to save again
            raise
        return run

    def _probe_connections(self, probes: list[Probe], cpu_probe: bool) -> int:
        """Connections the probes of a run open: one per SQL probe, and the cpu probe's."""
        return len(probes) + (1 if cpu_probe and self.target.postmaster_pid is not None else 0)

    @staticmethod
    def _clean_up(process: subprocess.Popen, reader: _OutputReader | None, sampler: Sampler,
                  registry: ProcessRegistry | None, *, wait: bool = False) -> dict[str, list[dict]]:
        """End a run: the probes told to stop, pgbench waited for (or killed after 5 s), pipes closed; the samples.

        ``wait``: pgbench is ending on its own (its -T or -t): wait for it as long as it takes.
        """
        sampler.signal_stop()
        try:
            process.wait(timeout=None if wait and reader is not None else 5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if reader is not None:
            reader.close()
        else:
            _close(process.stdout, process.stderr)
        samples = sampler.stop()
        if registry is not None:
            registry.remove(process.pid)
        return samples

    def _perf_attach(self, spec: pgbench.Spec) -> _PerfAttach | None:
        """What starts perf on the run's backends once they exist; None (the reason in ``_no_perf``) where it cannot."""
        available = perf_module.availability()
        if not available.available:
            self._no_perf = available.message
            return None
        if self.target.postmaster_pid is None:
            self._no_perf = "perf: the server is not a process labkit started on this machine; wait events only"
            return None
        # perf's own check of DWARF unwinding runs perf once (a second or more): paid now, before the run, not
        # by the thread that attaches perf once the clients have connected, which would start perf that late
        perf_module.dwarf_works()
        reconnects = any(flag in ("-C", "--connect") for flag in spec.flags)
        return _PerfAttach(self.target.conninfo, spec.clients, self.target.postmaster_pid if reconnects else None)

    _no_perf = "perf was not asked for"

    def _run(self, spec: pgbench.Spec, probes: list[Probe], observer: Observer | None, workdir: Path,
             held: processes.HeldInterrupts, *, cpu_probe: bool, attach: _PerfAttach | None = None):
        # pgbench runs in workdir and is given names relative to it: on Windows its command line is
        # read in the ANSI code page, where a user's folder name may not be writable.
        paths = []
        for index, script in enumerate(spec.scripts):
            path = Path(f"{index}-{Path(script.name).name}")
            (workdir / path).write_text(script.text if script.text.endswith("\n") else script.text + "\n",
                                        encoding=ENCODING)
            paths.append(path)
        argv = pgbench.build_argv(spec, paths, log_prefix=Path("tx"))
        application_name = db.run_name()
        environment = {**os.environ, **self.target.environment, "PGAPPNAME": application_name}
        context = run_record.Context(self.target.notebook, self.target.profile, self.target.server, now_iso(),
                                     tuple(argv))
        log.info("run %s (%s): pgbench %s", spec.name, application_name, " ".join(argv))
        started, started_epoch = time.monotonic(), time.time()
        process = subprocess.Popen([str(self.target.pgbench), *argv], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, cwd=workdir,
                                   **processes.child_options())
        registry = self.target.registry
        sampler = Sampler(self.target.conninfo, [p.for_run(application_name) for p in probes])
        reader = None
        interrupted = False
        try:  # from here on, whatever happens, pgbench does not outlive this call
            processes.bind_to_this_process(process)
            if registry is not None:
                registry.add(process.pid, owner=os.getpid(), notebook=self.target.notebook,
                             application_name=application_name)
            if cpu_probe:
                sampler.add(cpu.CpuSchedule(process, self.target.postmaster_pid, self.target.conninfo,
                                            application_name))
            sampler.start(started)
            reader = _OutputReader(process)
            if attach is not None:
                attach.begin(process, application_name, reader.first_progress)
            reader.follow(observer, sampler)
            held.hold()  # pgbench has ended: what follows makes its record
        except BaseException as error:  # an interrupt, or an error in an observer: pgbench stops either way
            held.hold()  # a second Ctrl+C must not stop the clean-up halfway (its backends left waiting)
            interrupted = True
            sampler.signal_stop()
            log.info("run %s stopped (%s): stopping pgbench and its backends", spec.name, type(error).__name__)
            processes.interrupt(process)
            db.terminate_runs(self.target.conninfo, [application_name])
            if not isinstance(error, KeyboardInterrupt):
                raise  # after the clean-up below
        finally:
            wall_s = time.monotonic() - started
            samples = self._clean_up(process, reader, sampler, registry, wait=not interrupted)
        # Backends flush their statistics as they exit: wait, so the next query sees this run's counts.
        wait_backends_gone(self.target.conninfo, application_name)
        # else interrupted before pgbench's output was read: nothing was measured
        outputs = run_record.Outputs(stdout=reader.stdout() if reader else "",
                                     stderr="\n".join(reader.other_lines) if reader else "",
                                     progress=reader.progress if reader else [],
                                     progress_arrivals=reader.arrivals if reader else [],
                                     wall_s=wall_s, transaction_log=_read_logs(workdir / "tx"), samples=samples,
                                     probe_errors=sampler.errors, interrupted=interrupted,
                                     exit_code=process.returncode, probe_costs=sampler.costs(),
                                     cpus=machine_size()[0], started_epoch=started_epoch,
                                     ended_epoch=reader.closed_at if reader else None)
        return run_record.record(spec, context, outputs), outputs


class _PerfAttach(threading.Thread):
    """Starts ``perf record`` on a run's own backends once pgbench has connected them all.

    Attaching to the server before the run and following its forks misses the backends when
    perf is slow to attach (a busy machine) and records the connecting as well; the backends
    exist from the end of the start phase to the end of the run, so attaching to them then
    records the run itself. A run that connects for each transaction (``-C``) has no lasting
    backends: perf then attaches to the server (``follow``) and follows its forks.
    """

    def __init__(self, conninfo: str, clients: int, follow: int | None = None):
        super().__init__(daemon=True, name="labkit-perf-attach")
        self.conninfo, self.clients, self.follow = conninfo, clients, follow
        self.recording: perf_module.Recording | None = None
        self.reason = "the run ended before its clients had all connected: perf recorded nothing"
        self._process: subprocess.Popen | None = None
        self._application_name = ""
        self._connected = threading.Event()
        self._finished = threading.Event()

    def begin(self, process: subprocess.Popen, application_name: str, connected: threading.Event) -> None:
        """Attach to the run's clients once they are all connected (``connected``: pgbench's first progress line).

        pgbench's own setup connection, which carries the run's name too, is left out: see :meth:`run`.
        """
        self._process, self._application_name, self._connected = process, application_name, connected
        if self.follow is not None:
            self.recording = perf_module.Recording(self.follow).start()
            return
        self.start()

    def run(self) -> None:
        assert self._process is not None
        try:
            with db.connect(self.conninfo, db.PROBE) as connection:
                seen: set[int] = set()
                while self._process.poll() is None and not self._finished.is_set():
                    pids = {pid for (pid,) in connection.execute(query("run_backends_pids"),
                                                                 {"application_name": self._application_name})}
                    # pgbench's own setup connection carries the run's name too and closes just before its
                    # clients connect: the clients are the set that stays the same, or that is there at its
                    # first progress line (printed once they are all connected)
                    if len(pids) == self.clients and (pids == seen or self._connected.is_set()):
                        self.recording = perf_module.Recording(sorted(pids)).start()
                        return
                    seen = pids
                    time.sleep(0.1)
        except psycopg.Error as error:
            self.reason = f"perf could not find the run's backends ({db.message(error)}): wait events only"

    def figures(self) -> dict:
        """``extra.perf`` once the run has ended."""
        self._finished.set()
        if self.is_alive():
            self.join(timeout=10)
        return perf_module.figures(self.recording, self.reason)

    def cleanup(self) -> None:
        self._finished.set()
        if self.is_alive():
            self.join(timeout=10)
        if self.recording is not None:
            self.recording.cleanup()


def _check_probe_names(probes: list[Probe]) -> None:
    """Each probe's samples are kept under its name: two probes may not share one, nor take labkit's own."""
    names = [p.name for p in probes]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"Two probes are named {', '.join(twice)}: give each probe its own name.")
    if CPU in names:
        raise UsageError(f"{CPU!r} is the name of labkit's own CPU probe: name your probe otherwise.")


class _OutputReader:
    """Reads pgbench's two pipes in threads (``select`` on pipes does not exist on Windows).

    Progress lines (stderr) come back to the caller's thread through a queue, so the observer
    is always called from the thread that started the run, and an interrupt lands there.
    """

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lines: queue.Queue[tuple[str, float] | None] = queue.Queue()  # a line and when it came (Unix time)
        self.arrivals: list[float] = []  # when each progress line came: pgbench's clock read against ours
        self.first_progress = threading.Event()  # pgbench prints none before every client has connected
        self.closed_at: float | None = None  # Unix time pgbench closed its error output: its exit, not our reading
        self._stdout: list[str] = []
        self.progress: list[pgbench.Progress] = []
        self.other_lines: list[str] = []
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True, name="labkit-pgbench-out"),
                         threading.Thread(target=self._read_stderr, daemon=True, name="labkit-pgbench-err")]
        for thread in self._threads:
            thread.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None  # opened with stdout=PIPE
        self._stdout.append(self.process.stdout.read().decode(ENCODING, errors="replace"))

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None  # opened with stderr=PIPE
        for raw in iter(self.process.stderr.readline, b""):
            self.lines.put((raw.decode(ENCODING, errors="replace").rstrip("\r\n"), time.time()))
        self.closed_at = time.time()
        self.lines.put(None)

    def follow(self, observer: Observer | None, sampler: Sampler) -> None:
        """Hand progress to ``observer`` until pgbench closes its error output."""
        while True:
            try:
                item = self.lines.get(timeout=0.2)
            except queue.Empty:
                item = ("", 0.0)
            if item is None:
                break
            line, arrived = item
            point = pgbench.parse_progress(line) if line else None
            if point is not None:
                self.progress.append(point)
                self.arrivals.append(arrived)
                self.first_progress.set()
                if observer is not None:
                    observer.progress(point, line)
            elif line:
                self.other_lines.append(line)
            if observer is not None:
                observer.samples(sampler.drain())
        self._drain_rest()

    def _drain_rest(self) -> None:
        while True:
            try:
                item = self.lines.get_nowait()
            except queue.Empty:
                return
            if item and item[0]:
                point = pgbench.parse_progress(item[0])
                if point:
                    self.progress.append(point)
                    self.arrivals.append(item[1])
                else:
                    self.other_lines.append(item[0])

    def stdout(self) -> str:
        return "".join(self._stdout)

    def close(self) -> None:
        for thread in self._threads:
            thread.join(timeout=5)
        self._drain_rest()
        _close(self.process.stdout, self.process.stderr)


def _close(*pipes: IO | None) -> None:
    for pipe in pipes:
        if pipe is not None:
            pipe.close()


def _read_logs(prefix: Path):
    import pandas as pd

    files = sorted(prefix.parent.glob(prefix.name + ".*"))
    frames = [pgbench.log_frame(path) for path in files if path.stat().st_size]
    if not frames:
        return None
    return pd.concat(frames, ignore_index=True)
