"""Client vs server CPU during a run, from the operating system (psutil, on every OS).

Each second: the cores pgbench used, those the run's backends used, those the rest of the
server used (its other processes: probes, WAL writer, autovacuum ...), and the machine's idle
cores. On a laptop, or Binder's one CPU, pgbench and the server share the cores: when pgbench
keeps a core busy per thread, or nothing is left idle, a tps ceiling is partly the client's.
The server's processes are counted only when labkit started the server on this machine.
"""

from __future__ import annotations

import psutil
import psycopg

from . import db
from .probes import CPU, _Schedule
from .queries import query

# pgbench is "busy" from this share of a core per thread; the machine is "full" when the
# processes of the run use this share of its cores, or fewer than IDLE_CORES are idle.
BUSY_THREAD = 0.8
FULL_MACHINE = 0.9
IDLE_CORES = 0.1


def _used(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _idle() -> float:
    times = psutil.cpu_times()
    return times.idle + getattr(times, "iowait", 0.0)  # iowait: idle while waiting for I/O (Linux)


class CpuSchedule(_Schedule):
    """The ``cpu`` probe: one row a second of cores used by pgbench, the run's backends and the rest of the server."""

    def __init__(self, pgbench_pid: int, postmaster_pid: int | None, conninfo: str, application_name: str):
        super().__init__(CPU, 1.0, 0.0, None)  # type: ignore[arg-type]  # the Sampler sets t0 and stopping
        self.pgbench_pid = pgbench_pid
        self.postmaster_pid = postmaster_pid
        self.conninfo = conninfo
        self.application_name = application_name
        self.connection: psycopg.Connection | None = None
        self._processes: dict[int, psutil.Process] = {}
        self._before: dict[int, float] = {}
        self._last: tuple[float, float] | None = None  # (monotonic, idle) of the last sample
        self._pgbench: psutil.Process | None = None

    def open(self) -> None:
        import time

        self._pgbench = psutil.Process(self.pgbench_pid)
        self._before[self.pgbench_pid] = _used(self._pgbench)
        if self.postmaster_pid is not None:
            self.connection = db.connect(self.conninfo, db.PROBE)
            for process in self._server_processes():  # from now on: what they used before is not the run's
                self._delta(process.pid, process)
        self._last = (time.monotonic(), _idle())

    def _delta(self, pid: int, process: psutil.Process) -> float:
        """CPU seconds ``pid`` used since the last sample (all of it, the first time it is seen)."""
        try:
            now = _used(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return 0.0
        delta = now - self._before.get(pid, 0.0)
        self._before[pid] = now
        return max(0.0, delta)

    def sample(self, t: float) -> list[dict]:
        import time

        assert self._pgbench is not None and self._last is not None
        now, idle = time.monotonic(), _idle()
        wall = now - self._last[0]
        if wall < 0.2 * self.every_s:  # the first tick, right after open(): nothing measured yet
            return []
        row: dict = {"t": t, "pgbench": round(self._delta(self.pgbench_pid, self._pgbench) / wall, 3),
                     "backends": None, "server_other": None,
                     "idle": round(max(0.0, idle - self._last[1]) / wall, 3)}
        self._last = (now, idle)
        if self.connection is not None and self.postmaster_pid is not None:
            run_pids = {pid for (pid,) in self.connection.execute(query("run_backends_pids"),
                                                                  {"application_name": self.application_name})}
            backends = other = 0.0
            for process in self._server_processes():
                used = self._delta(process.pid, process)
                if process.pid in run_pids:
                    backends += used
                else:
                    other += used
            row.update(backends=round(backends / wall, 3), server_other=round(other / wall, 3))
        return [row]

    def _server_processes(self) -> list[psutil.Process]:
        """The postmaster and its children, with their Process objects kept (psutil's times are per object)."""
        assert self.postmaster_pid is not None
        try:
            postmaster = self._processes.get(self.postmaster_pid) or psutil.Process(self.postmaster_pid)
            children = postmaster.children()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return []
        self._processes[self.postmaster_pid] = postmaster
        found = [postmaster]
        for child in children:
            found.append(self._processes.setdefault(child.pid, child))
        return found

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


def figures(rows: list[dict], threads: int, cpus: float) -> dict:
    """The run's CPU in a few numbers (means over its seconds, in cores) and, when it applies, the warning.

    >>> figures([{"t": 1, "pgbench": 0.95, "backends": 0.9, "server_other": 0.05, "idle": 0.1}], 1, 2)["warning"][:46]
    'pgbench kept 95% of a core busy per thread (1 '
    >>> figures([{"t": 1, "pgbench": 0.2, "backends": 0.5, "server_other": 0.0, "idle": 3.0}], 2, 4)["warning"] is None
    True
    """
    seconds = [row for row in rows if row.get("pgbench") is not None]
    if not seconds:
        return {}

    def mean(column: str) -> float | None:
        values = [row[column] for row in seconds if row.get(column) is not None]
        return round(sum(values) / len(values), 3) if values else None

    result: dict = {"pgbench": mean("pgbench"), "backends": mean("backends"), "server_other": mean("server_other"),
                    "idle": mean("idle"), "cpus": cpus, "threads": threads}
    result["pgbench_per_thread"] = round((result["pgbench"] or 0.0) / max(1, threads), 3)
    result["warning"] = warning(result)
    return result


def warning(cpu: dict) -> str | None:
    """One plain sentence when the client may have limited the tps; None when nothing says so."""
    per_thread = cpu.get("pgbench_per_thread") or 0.0
    threads = cpu.get("threads") or 1
    if per_thread >= BUSY_THREAD:
        return (f"pgbench kept {per_thread:.0%} of a core busy per thread ({threads} thread{'s' * (threads > 1)}): "
                "the tps is partly pgbench's own limit. More threads (-j), on more cores, would tell.")
    used = sum(cpu.get(part) or 0.0 for part in ("pgbench", "backends", "server_other"))
    idle = cpu.get("idle")
    cpus = cpu.get("cpus") or 0
    if (cpus and used >= FULL_MACHINE * cpus) or (idle is not None and idle < IDLE_CORES):
        server = (cpu.get("backends") or 0.0) + (cpu.get("server_other") or 0.0)
        return (f"The machine had no idle CPU left (pgbench {cpu.get('pgbench') or 0:.1f} cores, the server "
                f"{server:.1f}, of {cpus:g}): pgbench and the server shared the cores, so the tps is partly "
                "the client's limit.")
    return None
