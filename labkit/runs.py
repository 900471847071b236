"""Running pgbench: the thin layer that waits, around the pure logic of :mod:`labkit.pgbench`.

One run at a time per kernel. While pgbench runs, its progress lines feed the live chart
and the probes sample the server. An interrupt stops pgbench at once (SIGINT, then
SIGKILL), terminates the backends it left (found by the run's application_name), saves
what was measured as an interrupted run, and re-raises. On Linux pgbench also dies with
the kernel (a parent-death signal), and on every platform the next ``labkit.start()``
kills any pgbench whose kernel is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil
import psycopg

from . import pgbench
from . import perf as perf_mod
from .errors import LabkitError, UsageError, tail
from .probes import WORK, Probe, Sampler
from .queries import query
from .records import Run, now_iso

_ONE_RUN = threading.Lock()


def _child_setup() -> None:  # pragma: no cover - runs in the child between fork and exec
    """pgbench dies with its parent (Linux) and may open as many sockets as the hard limit allows."""
    import resource

    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        if soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    if sys.platform == "linux":
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def free_connections(dsn: str) -> int:
    """Connections an ordinary client can still open on the server."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as connection:
        in_use, maximum, reserved = connection.execute(query("connections")).fetchone()
    return maximum - reserved - in_use


def work_probe(sql: str) -> Probe:
    """The probe that samples a work counter (one number) once a second during a run."""
    return Probe(WORK, f"select ({sql.strip().rstrip(';')}) as work", 1.0)


def measure_work(dsn: str, sql: str) -> float:
    """The work counter now: one number, e.g. ``select count(*) from done``."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as connection:
            row = connection.execute(work_probe(sql).sql).fetchone()
    except psycopg.Error as error:
        raise UsageError(f"The work query failed: {(error.diag.message_primary or str(error)).strip()}. "
                         "It must return one number, e.g. select count(*) from done.") from None
    try:
        return float(row[0])
    except (TypeError, ValueError):
        raise UsageError(f"The work query returned {row[0]!r}, not a number: it must count work done so far.") from None


def wait_backends_gone(dsn: str, application_name: str, timeout_s: float = 5.0) -> bool:
    """Wait until the run's backends have exited (and so flushed their statistics); True if they did."""
    deadline = time.monotonic() + timeout_s
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as connection:
            while time.monotonic() < deadline:
                left = connection.execute("select count(*) from pg_stat_activity where application_name = %s",
                                          (application_name,)).fetchone()[0]
                if not left:
                    return True
                time.sleep(0.05)
    except psycopg.Error:
        pass
    return False


def terminate_backends(dsn: str, application_name: str) -> int:
    """Terminate the backends an interrupted run left behind."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as connection:
            rows = connection.execute(query("terminate_run"), {"application_name": application_name}).fetchall()
    except psycopg.Error:
        return 0
    return len(rows)


class Runner:
    """Runs one :class:`~labkit.pgbench.Spec` against a lab database and returns its :class:`Run`."""

    def __init__(self, *, dsn: str, env: dict[str, str], pgbench_bin: Path, registry: Path | None,
                 notebook: str, profile: str, server_info: dict, server_pid: int | None = None):
        self.dsn = dsn
        self.env = env
        self.pgbench_bin = pgbench_bin
        self.registry = registry
        self.notebook = notebook
        self.profile = profile
        self.server_info = server_info
        self.server_pid = server_pid  # the local postmaster, for perf (None: not a local server)

    def run(self, spec: pgbench.Spec, *, probes: list[Probe] = (), chart=None, echo=None,
            work: str | None = None, perf: bool = False) -> Run:
        """Run ``spec``; ``work`` is SQL counting the work done so far (for goodput), sampled each second.

        ``perf`` records the server's processes with ``perf record -e cpu-clock`` during the run
        (``extra.perf``: top symbols, folded call chains); where perf cannot, ``extra.perf`` says why
        in one line and the wait-event samples are what remains.
        """
        if not _ONE_RUN.acquire(blocking=False):
            raise UsageError("A pgbench run is already going on in this kernel: wait for it or interrupt it.")
        try:
            probes = [p for p in probes if p.name != WORK] + ([work_probe(work)] if work else [])
            spec.check(max_clients=free_connections(self.dsn) - (1 if probes else 0))
            before = measure_work(self.dsn, work) if work else None
            workdir = Path(tempfile.mkdtemp(prefix="labkit-run-"))
            recording = self._perf_recording() if perf else None
            try:
                return self._run(spec, probes, chart, echo, workdir, work, before, recording)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
                if isinstance(recording, perf_mod.Recording):
                    recording.cleanup()
        finally:
            _ONE_RUN.release()

    def _perf_recording(self):
        """A started perf Recording of the server, or a one-line reason why there is none."""
        available = perf_mod.availability()
        if not available.available:
            return available.message
        if self.server_pid is None:
            return "perf: the server is not a process labkit started on this machine; wait events only"
        recording = perf_mod.Recording(self.server_pid).start()
        time.sleep(0.3)  # let perf attach before pgbench connects
        return recording

    def _run(self, spec, probes, chart, echo, workdir: Path, work: str | None, work_before: float | None,
             recording=None) -> Run:
        paths = []
        for index, script in enumerate(spec.scripts):
            path = workdir / f"{index}-{Path(script.name).name}"
            path.write_text(script.text if script.text.endswith("\n") else script.text + "\n")
            paths.append(path)
        log_prefix = workdir / "tx"
        argv = pgbench.build_argv(spec, paths, log_prefix=log_prefix, database=self.dsn)
        application_name = f"labkit-run-{uuid.uuid4().hex[:8]}"
        env = {**os.environ, **self.env, "PGAPPNAME": application_name}
        started_at = now_iso()
        sampler = Sampler(self.dsn, probes)
        t0 = time.monotonic()
        process = subprocess.Popen(
            [str(self.pgbench_bin), *argv],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=workdir,
            start_new_session=True, preexec_fn=_child_setup if os.name == "posix" else None,
        )
        record = self._register(process.pid)
        sampler.start(t0)
        progress: list[pgbench.Progress] = []
        stdout, stderr_lines = [], []
        interrupted = False
        try:
            self._read(process, progress, stdout, stderr_lines, chart, echo, sampler)
        except KeyboardInterrupt:
            interrupted = True
            self._stop(process, application_name)
        finally:
            process.wait()
            wall_s = time.monotonic() - t0
            process.stdout.close()
            process.stderr.close()
            samples = sampler.stop()
            if record:
                record.unlink(missing_ok=True)
            perf_figures = _perf_figures(recording)
        # Backends flush their statistics as they exit: wait, so the next query sees this run's counts.
        wait_backends_gone(self.dsn, application_name)
        run = self._record(spec, argv, started_at, wall_s, progress, "".join(stdout), "\n".join(stderr_lines),
                           log_prefix, samples, sampler, interrupted)
        if work:
            with contextlib.suppress(UsageError):
                done = measure_work(self.dsn, work) - work_before
                run.extra.update(work_figures(done, run))
        if perf_figures is not None:
            run.extra["perf"] = perf_figures
        if interrupted:
            if run.transactions:
                run.save()
            raise KeyboardInterrupt(f"pgbench run {spec.name!r} interrupted after {wall_s:.1f} s")
        if process.returncode != 0 and not run.transactions:
            raise LabkitError(
                f"pgbench stopped: {run.errors[0] if run.errors else 'exit ' + str(process.returncode)}",
                detail="Fix the script and run the cell again." if run.errors else tail("\n".join(stderr_lines)),
            )
        run.save()
        return run

    def _register(self, pid: int) -> Path | None:
        if self.registry is None:
            return None
        self.registry.mkdir(parents=True, exist_ok=True)
        me = psutil.Process()
        with contextlib.suppress(psutil.Error):
            info = {"pid": pid, "created": psutil.Process(pid).create_time(), "owner": me.pid,
                    "owner_created": me.create_time()}
            path = self.registry / f"{pid}.json"
            path.write_text(json.dumps(info))
            return path
        return None

    @staticmethod
    def _read(process, progress, stdout, stderr_lines, chart, echo, sampler) -> None:
        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ, "out")
        selector.register(process.stderr, selectors.EVENT_READ, "err")
        partial = ""
        while selector.get_map():
            for key, _ in selector.select(timeout=0.2):
                data = os.read(key.fileobj.fileno(), 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                text = data.decode(errors="replace")
                if key.data == "out":
                    stdout.append(text)
                    continue
                lines = (partial + text).split("\n")
                partial = lines.pop()
                for line in lines:
                    point = pgbench.parse_progress(line)
                    if point is None:
                        stderr_lines.append(line)
                        continue
                    progress.append(point)
                    if echo:
                        echo(line)
                    if chart is not None:
                        chart.add_progress(point)
            if chart is not None:
                chart.add_samples(sampler.drain())
        if partial:
            stderr_lines.append(partial)
        selector.close()

    def _stop(self, process, application_name: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
        terminate_backends(self.dsn, application_name)

    def _record(self, spec, argv, started_at, wall_s, progress, stdout, stderr, log_prefix, samples, sampler,
                interrupted) -> Run:
        summary = pgbench.parse_summary(stdout)
        problems = pgbench.parse_errors(stderr)
        log = _read_logs(log_prefix)
        sampling = spec.sampling_rate or 1.0
        fine, latency, fine_width = [], {}, None
        connection_s = (summary.initial_connection_ms or 0) / 1000
        if log is not None and not log.empty:
            start = pgbench.log_start(log)
            fine_width = 0.1
            end = start + spec.duration_s if spec.duration_s else None
            fine = [vars(b) for b in pgbench.bin_log(log, start, fine_width, sampling_rate=sampling, end_s=end)]
            latency = pgbench.latency_figures(log)
        elif summary.latency_avg_ms is not None:
            latency = {"avg": summary.latency_avg_ms, "stddev": summary.latency_stddev_ms}
        per_second = [vars(p) for p in progress]
        stalls = [vars(s) for s in pgbench.find_stalls([(p.t, p.tps) for p in progress])]
        for name, rows in samples.items():  # probes share pgbench's clock (which starts after connecting)
            for row in rows:
                row["t"] = round(row["t"] - connection_s, 3)
        transactions = summary.transactions
        if transactions is None and progress:
            transactions = int(sum(p.tps for p in progress))
        overrun = None
        if spec.duration_s:
            overrun = round(max(0.0, wall_s - connection_s - spec.duration_s), 2)
        tps = summary.tps
        if tps is None and progress:
            tps = sum(p.tps for p in progress) / len(progress)
        return Run(
            name=spec.name, notebook=self.notebook, profile=self.profile, started_at=started_at,
            server=self.server_info, scripts=[vars(s) for s in spec.scripts], clients=spec.clients,
            jobs=spec.threads, duration_s=spec.duration_s, transactions_per_client=spec.transactions,
            mode=spec.mode, argv=argv[:-1], wall_s=round(wall_s, 3), overrun_s=overrun, tps=tps,
            latency_ms=latency, transactions=transactions, failures=summary.failed,
            retries=summary.retries, aborted_clients=problems.aborted_clients, errors=list(problems.errors),
            interrupted=interrupted, per_second=per_second, fine=fine, fine_width_s=fine_width, stalls=stalls,
            probes={name: rows for name, rows in samples.items()},
            statements=[vars(s) for s in summary.statements],
            extra={"probe_errors": sampler.errors} if sampler.errors else {},
        )


def _perf_figures(recording) -> dict | None:
    """What goes in ``extra.perf``: the profile, or why there is none."""
    if recording is None:
        return None
    if isinstance(recording, str):
        return {"available": False, "message": recording}
    profile = recording.stop()
    if profile is None:
        return {"available": False, "message": recording.message}
    return {"available": True, **profile.to_dict()}


def work_figures(done: float, run: Run) -> dict:
    """Goodput beside tps: work per second on pgbench's own clock, and the share of useful transactions.

    pgbench's tps is transactions / (its run time); goodput is work / the same time, so the two
    compare directly even when some transactions did nothing (a skipped lock, an empty queue).
    """
    figures = {"work": int(done) if float(done).is_integer() else done}
    if run.tps and run.transactions:
        seconds = run.transactions / run.tps
    else:
        seconds = run.duration_s or run.wall_s or 0
    if seconds:
        figures["goodput"] = round(done / seconds, 1)
    if run.transactions:
        figures["useful"] = round(done / run.transactions, 4)
    return figures


def _read_logs(prefix: Path):
    import pandas as pd

    files = sorted(prefix.parent.glob(prefix.name + ".*"))
    frames = [pgbench.log_frame(path) for path in files if path.stat().st_size]
    if not frames:
        return None
    return pd.concat(frames, ignore_index=True)
