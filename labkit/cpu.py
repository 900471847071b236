"""Client vs server CPU during a run, from the operating system (psutil, on every OS).

Each second: the cores pgbench used, those the run's backends used, those the rest of the
server used (its other processes: probes, WAL writer, autovacuum ...), those labkit's own process
used (the kernel that samples and draws: the instrument), and the machine's idle cores. On a laptop, or Binder's one CPU, pgbench and the server share the cores: when pgbench
keeps a core busy per thread, or nothing is left idle, a tps ceiling is partly the client's.
The server's processes are counted only when labkit started the server on this machine.
"""

from __future__ import annotations

import subprocess
import threading
import time

import psutil
import psycopg

from . import db
from .probes import CPU, _Schedule
from .profiles import _read_first, limiting_cgroup, machine_size
from .queries import query

# pgbench is "busy" from this share of a core per thread; the machine is "full" when the
# processes of the run use this share of its cores, or fewer than IDLE_CORES are idle.
BUSY_THREAD = 0.8
FULL_MACHINE = 0.9
IDLE_CORES = 0.1
OTHERS_SHARE = 0.25  # other processes matter from this share of the machine's cores
EVERY_S = 0.25  # one sample each 250 ms, as the wait events: a 4-second run has a CPU figure too


def _times(process: psutil.Process):
    """``process.cpu_times()``; None when it is gone or may not be read."""
    try:
        return process.cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _used(process: psutil.Process) -> float | None:
    """CPU seconds ``process`` has used; None when it is gone or may not be read."""
    times = _times(process)
    return None if times is None else times.user + times.system


def _reaped(process: psutil.Process) -> float:
    """CPU of the children ``process`` has reaped (Linux: exited backends; 0 where psutil has no such figure)."""
    times = _times(process)
    return getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)


def _container_used() -> float | None:
    """CPU seconds used under this process's CPU limit (cgroup v2's cpu.stat of the folder that sets it)."""
    folder = limiting_cgroup()
    stat = (_read_first([str(folder / "cpu.stat")]) if folder is not None else None) or ""
    usage = [line.split()[1] for line in stat.splitlines() if line.startswith("usage_usec ")]
    return int(usage[0]) / 1e6 if usage and usage[0].isdigit() else None


def _host_idle() -> float:
    times = psutil.cpu_times()
    return times.idle + getattr(times, "iowait", 0.0)  # iowait: idle while waiting for I/O (Linux)


class CpuSchedule(_Schedule):
    """The ``cpu`` probe: a row each 250 ms of cores used by pgbench, the run's backends and the rest of the server.

    Processes are told apart by pid and start time (psutil's Process equality), so a pid the OS
    gives again to a new process is a new process. On Linux the CPU of backends that exited
    between two samples is counted too: the postmaster's reaped children, less what was already
    counted of them while they ran (reaped time is each child's whole life). Where this process
    runs under a CPU limit smaller than the host (a container, Binder), "idle" is what is left
    of that limit, not the host's idle cores.
    """

    def __init__(self, pgbench: subprocess.Popen, postmaster_pid: int | None, conninfo: str, application_name: str,
                 cpus: float | None = None):
        super().__init__(CPU, EVERY_S, 0.0, threading.Event())  # the Sampler sets t0 and stopping
        self.pgbench = pgbench
        self.postmaster_pid = postmaster_pid
        self.conninfo = conninfo
        self.application_name = application_name
        self.cpus = cpus if cpus is not None else machine_size()[0]
        self.connection: psycopg.Connection | None = None
        self._before: dict[psutil.Process, float] = {}
        self._owed = 0.0  # CPU already counted of processes that are gone: reaped time will include it again
        self._last: tuple[float, float, float] | None = None  # monotonic, idle-or-used clock, reaped children
        self._pgbench: psutil.Process | None = None
        self._labkit = psutil.Process()  # this process: its sampling threads and live charts are the instrument's
        self._postmaster: psutil.Process | None = None
        self._limited = self.cpus < (psutil.cpu_count() or 1) and _container_used() is not None

    def open(self) -> None:
        self._pgbench = psutil.Process(self.pgbench.pid)
        self._delta(self._pgbench)
        self._delta(self._labkit)
        if self.postmaster_pid is not None:
            self.connection = db.connect(self.conninfo, db.PROBE)
            self._postmaster = psutil.Process(self.postmaster_pid)
            for process in self._server_processes():  # from now on: what they used before is not the run's
                self._delta(process)
        self._last = (time.monotonic(), self._machine_clock(), self._reaped_now())

    def _machine_clock(self) -> float:
        """Seconds of idle CPU on the host, or of CPU used by this container when it has a limit."""
        if self._limited:
            return _container_used() or 0.0
        return _host_idle()

    def _reaped_now(self) -> float:
        return _reaped(self._postmaster) if self._postmaster is not None else 0.0

    def _delta(self, process: psutil.Process) -> float | None:
        """CPU seconds ``process`` used since the last sample (all of it, the first time it is seen)."""
        now = _used(process)
        if now is None:
            self._forget(process)
            return None
        delta = now - self._before.get(process, 0.0)
        self._before[process] = now
        return max(0.0, delta)

    def sample(self, t: float) -> list[dict]:
        assert self._pgbench is not None and self._last is not None
        if self.pgbench.poll() is not None:  # pgbench has ended: the seconds after are not the run's
            return []
        now, clock, reaped = time.monotonic(), self._machine_clock(), self._reaped_now()
        wall = now - self._last[0]
        if wall < 0.2 * self.every_s:  # the first tick, right after open(): nothing measured yet
            return []
        used = self._delta(self._pgbench)
        instrument = self._delta(self._labkit)
        if self._limited:  # what the container's limit had left
            idle = max(0.0, self.cpus - (clock - self._last[1]) / wall)
        else:
            idle = max(0.0, clock - self._last[1]) / wall
        row: dict = {"t": t, "pgbench": None if used is None else round(used / wall, 3),
                     "backends": None, "server_other": None, "idle": round(idle, 3),
                     "labkit": None if instrument is None else round(instrument / wall, 3)}
        # Processes gone since the last sample are forgotten first, so that what was counted of them while
        # they ran is owed before the postmaster's reaped time (their whole life) is credited.
        processes = self._server_processes() if self.connection is not None else []
        exited = self._reaped_since(reaped - self._last[2])
        self._last = (now, clock, reaped)
        if self.connection is not None:
            run_pids = {pid for (pid,) in self.connection.execute(query("run_backends_pids"),
                                                                  {"application_name": self.application_name})}
            backends, other = exited, 0.0  # backends that exited since the last sample were (nearly all) the run's
            for process in processes:
                spent = self._delta(process) or 0.0
                if process.pid in run_pids:
                    backends += spent
                else:
                    other += spent
            row.update(backends=round(backends / wall, 3), server_other=round(other / wall, 3))
        return [row]

    def _server_processes(self) -> list[psutil.Process]:
        """The postmaster and its children now; processes that are gone are forgotten."""
        assert self._postmaster is not None
        try:
            found = [self._postmaster, *self._postmaster.children()]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return []
        alive = set(found)
        for process in [p for p in self._before if p not in alive and p not in (self._pgbench, self._labkit)]:
            self._forget(process)
        return found

    def _forget(self, process: psutil.Process) -> None:
        """A process that is gone: what was counted of it will come back in the postmaster's reaped time."""
        counted = self._before.pop(process, None)
        if counted is not None and process not in (self._pgbench, self._labkit):
            self._owed += counted

    def _reaped_since(self, increase: float) -> float:
        """CPU of children reaped since the last sample that was not counted while they ran.

        >>> schedule = CpuSchedule.__new__(CpuSchedule)
        >>> schedule._owed = 3.0  # a backend counted for 3 s, now gone
        >>> schedule._reaped_since(0.0), schedule._reaped_since(3.25), schedule._owed
        (0.0, 0.25, 0.0)
        """
        increase = max(0.0, increase)
        credit = min(increase, self._owed)
        self._owed -= credit
        return increase - credit

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


def figures(rows: list[dict], threads: int, cpus: float, every_s: float = EVERY_S) -> dict:
    """The run's CPU in a few numbers (means over its samples, in cores) and, when it applies, the warning.

    >>> figures([{"t": t, "pgbench": 0.95, "backends": 0.9, "server_other": 0.05, "idle": 0.1} for t in range(4)], 1, 2)["warning"][:58]
    'Held back by the client: pgbench kept 95% of a core busy p'
    >>> figures([{"t": 1, "pgbench": 0.2, "backends": 0.5, "server_other": 0.0, "idle": 3.0}], 2, 4)["warning"] is None
    True
    """
    measured = [row for row in rows if row.get("pgbench") is not None]  # pgbench measured (alive, readable)
    if not measured:
        return {}

    def mean(column: str) -> float | None:
        values = [row[column] for row in measured if row.get(column) is not None]
        return round(sum(values) / len(values), 3) if values else None

    result: dict = {"pgbench": mean("pgbench"), "backends": mean("backends"), "server_other": mean("server_other"),
                    "idle": mean("idle"), "labkit": mean("labkit"), "cpus": cpus, "threads": threads, "samples": len(measured),
                    "every_s": every_s}
    result["pgbench_per_thread"] = round((result["pgbench"] or 0.0) / max(1, threads), 3)
    result["warning"] = warning(result)
    return result


def measured(cpu: dict) -> tuple[int, float]:
    """How many samples a run's CPU split rests on, and the seconds they cover (records before 250 ms: 1 s each).

    >>> measured({"samples": 12, "every_s": 0.25}), measured({"seconds": 3})
    ((12, 3.0), (3, 3.0))
    """
    if "samples" in cpu:
        count = int(cpu.get("samples") or 0)
        return count, count * float(cpu.get("every_s") or EVERY_S)
    count = int(cpu.get("seconds") or 0)
    return count, float(count)


def enough(cpu: dict) -> bool:
    """Whether the CPU split rests on enough to say what held a run back: a second of samples, two at least."""
    count, seconds = measured(cpu)
    return count >= 2 and seconds >= 1.0 - 1e-9


def others(cpu: dict) -> float | None:
    """Cores other processes of the machine used during the run (None where the server's CPU is unknown).

    Neither the experiment's (pgbench, the server) nor the instrument's (labkit's own process,
    where the record has it).

    >>> others({"pgbench": 0.1, "backends": 0.5, "server_other": 0.1, "idle": 0.2, "labkit": 0.1, "cpus": 2})
    1.0
    """
    if cpu.get("backends") is None or cpu.get("idle") is None or not cpu.get("cpus"):
        return None
    ours = ((cpu.get("backends") or 0.0) + (cpu.get("server_other") or 0.0) + (cpu.get("pgbench") or 0.0)
            + (cpu.get("labkit") or 0.0))
    return round(max(0.0, cpu["cpus"] - cpu["idle"] - ours), 3)


def findings(cpu: dict) -> dict[str, dict]:
    """What the CPU split of one run says held it back, as numbers: ``client``, ``others`` or ``no_cpu``.

    Only from a second of samples (:func:`enough`); and where the server's own CPU was not measured
    (a server labkit did not start here), nothing is said of other processes or the machine's CPU.
    Other processes are named only when the machine had no idle CPU: with cores to spare, what
    they used took nothing from the run.

    >>> sorted(findings({"pgbench": 0.9, "backends": 1.0, "server_other": 0.05, "idle": 0.05, "cpus": 2,
    ...                  "threads": 1, "pgbench_per_thread": 0.9, "samples": 12, "every_s": 0.25}))
    ['client', 'no_cpu']
    >>> findings({"pgbench": 0.1, "backends": 0.2, "server_other": 0.0, "idle": 0.9, "cpus": 2, "threads": 1,
    ...           "pgbench_per_thread": 0.1, "samples": 12, "every_s": 0.25})  # 0.8 cores to others, 0.9 idle
    {}
    """
    if not enough(cpu):
        return {}
    found: dict[str, dict] = {}
    pgbench = cpu.get("pgbench") or 0.0
    if (cpu.get("pgbench_per_thread") or 0.0) >= BUSY_THREAD:
        found["client"] = {"per_thread": cpu["pgbench_per_thread"], "threads": cpu.get("threads") or 1}
    used = others(cpu)
    if used is None:
        return found  # the server's CPU is unknown: what else the machine did cannot be told apart from it
    server = (cpu.get("backends") or 0.0) + (cpu.get("server_other") or 0.0)
    cpus, idle = cpu.get("cpus") or 0.0, cpu.get("idle") or 0.0
    full = idle < IDLE_CORES or pgbench + server >= FULL_MACHINE * cpus
    if full and used >= OTHERS_SHARE * cpus:
        found["others"] = {"others": used, "cpus": cpus, "pgbench": pgbench, "server": server}
    elif full:
        found["no_cpu"] = {"cpus": cpus, "pgbench": pgbench, "server": server, "others": used}
    return found


def sentence(kind: str, values: list[dict], name: str, runs: int) -> str:
    """One sentence for a finding of ``kind`` in ``len(values)`` of ``runs`` runs named ``name`` (ranges when several).

    >>> sentence("client", [{"per_thread": 0.85, "threads": 1}, {"per_thread": 0.93, "threads": 1}], "hash", 3)
    'the client: pgbench kept 85–93% of a core busy per thread (1 thread) in 2 of 3 hash runs'
    """
    def span(key: str, form: str) -> str:
        low, high = min(v[key] for v in values), max(v[key] for v in values)
        shown_low, shown_high = format(low, form), format(high, form)
        return shown_low if shown_low == shown_high else f"{shown_low}–{shown_high}"

    where = f"in {name}" if runs == 1 else f"in {len(values)} of {runs} {name} runs"
    if kind == "client":
        threads = values[0]["threads"]
        return (f"the client: pgbench kept {span('per_thread', '.0%').replace('%–', '–')} of a core busy per thread "
                f"({threads} thread{'s' * (threads > 1)}) {where}")
    cpus = values[0]["cpus"]
    if kind == "others":
        return (f"other processes on this machine used {span('others', '.1f')} of its {cpus:g} cores {where} "
                f"(pgbench {span('pgbench', '.1f')}, the server {span('server', '.1f')})")
    if max(v.get("others", 0.0) for v in values) >= 0.1:  # the rest went to other processes: say so
        return (f"the CPU: no core idle {where} (the server {span('server', '.1f')}, pgbench {span('pgbench', '.1f')}, "
                f"other processes {span('others', '.1f')} of {cpus:g})")
    return (f"the CPU: the server ({span('server', '.1f')} cores) and pgbench ({span('pgbench', '.1f')}) used all "
            f"{cpus:g} core{'s' * (cpus != 1)} {where}")


def limits(cpu: dict, name: str = "the run") -> list[str]:
    """What the CPU split says held one run back, in sentences: the client, other processes, or no CPU left.

    A machine kept busy by other processes is said as such: it is never read as a client limit.

    >>> limits({"pgbench": 0.1, "backends": 0.3, "server_other": 0.1, "idle": 0.0, "cpus": 2, "threads": 1,
    ...         "pgbench_per_thread": 0.1, "samples": 16, "every_s": 0.25})
    ['other processes on this machine used 1.5 of its 2 cores in the run (pgbench 0.1, the server 0.4)']
    >>> limits({"pgbench": 0.9, "backends": 1.0, "server_other": 0.05, "idle": 0.05, "cpus": 2, "threads": 1,
    ...         "pgbench_per_thread": 0.9, "samples": 16, "every_s": 0.25})
    ['the client: pgbench kept 90% of a core busy per thread (1 thread) in the run', 'the CPU: the server (1.1 cores) and pgbench (0.9) used all 2 cores in the run']
    """
    return [sentence(kind, [values], name, 1) for kind, values in findings(cpu).items()]


def warning(cpu: dict) -> str | None:
    """One plain sentence when the CPU split says something held the run back; None when nothing does."""
    found = limits(cpu)
    if not found:
        return None
    text = "; ".join(found)
    return f"Held back by {text}: the tps is not the server's alone."
