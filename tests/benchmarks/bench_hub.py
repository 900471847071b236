"""What a class costs on one JupyterHub (prints figures; asserts nothing).

    python tests/benchmarks/bench_hub.py [--labs 02-flash-sale ...] [--students 1 2 4] [--profile ci]

As root on Linux, with Node.js (tests/hub/harness.py starts a real hub with
docker/hub/jupyterhub_config.py). For each class size N, a fresh hub and N new students: each
starts their server, opens the lab's notebook (a kernel) and then runs every cell of it, all N
at once, as on the first day of a class (each student's PostgreSQL is made by initdb in the
lab's first cell). Printed for each lab and N:

- each student's lab: its wall time and whether every cell passed;
- each student's peak memory: the PSS of all their processes (single-user server, kernel,
  PostgreSQL, pgbench) added up, sampled every ``--every`` seconds (a lower bound of the true
  peak). PSS divides each shared page among every process that maps it, the other students'
  and the hub's included: it is each student's share, and shrinks a little as the class grows;
- the machine's peak: its used memory (total less available, for the whole host: the page cache
  the kernel can drop is not in it, shared memory and tmpfs are) above what it was before the
  hub started;
- each student idle afterwards: server and kernel still open, PostgreSQL still up;
- each student's transactions, all the lab's runs together (from their run records): the runs
  have fixed lengths, so a shared CPU shows as fewer transactions rather than a longer lab.

The sampler's own CPU time is printed too: reading every process's smaps_rollup is not free.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from labkit import records  # noqa: E402
from tests.hub import harness  # noqa: E402

MIB = 2**20


def students_pss(uids: dict[str, int]) -> dict[str, int]:
    """Each student's PSS: that of every process of their uid, added up (bytes), from one pass over the processes."""
    names = {uid: name for name, uid in uids.items()}
    totals = dict.fromkeys(uids, 0)
    for process in psutil.process_iter(["uids"]):
        name = names.get(process.info["uids"].real) if process.info["uids"] else None
        if name:
            try:
                totals[name] += process.memory_full_info().pss
            except psutil.Error:
                continue  # it ended between the listing and the read
    return totals


def used() -> int:
    memory = psutil.virtual_memory()
    return memory.total - memory.available


class Sampler(threading.Thread):
    """Every ``every`` seconds: each student's PSS and the machine's used memory; keeps the peaks."""

    def __init__(self, uids: dict[str, int], every: float):
        super().__init__(daemon=True)
        self.uids, self.every = uids, every
        self.peak = dict.fromkeys(uids, 0)
        self.machine_peak = 0
        self.cpu_s = 0.0
        self.samples = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            started = time.thread_time()
            for name, pss in students_pss(self.uids).items():
                self.peak[name] = max(self.peak[name], pss)
            self.machine_peak = max(self.machine_peak, used())
            self.cpu_s += time.thread_time() - started
            self.samples += 1
            self._done.wait(self.every)

    def stop(self) -> None:
        self._done.set()
        self.join()


def one_class(size: int, lab: Path, profile: str, every: float) -> None:
    names = [f"s{number}" for number in range(1, size + 1)]
    baseline = used()
    with harness.Hub({"LABKIT_HUB_PROFILE": profile}) as hub:
        hub.add_students(names)
        for name in names:
            hub.spawn(name)
        for name in names:
            hub.wait_ready(name)
        uids = {name: harness.system_user(name).pw_uid for name in names}
        kernels = {name: harness.Kernel(hub, name, lab.name, hub.student_token(name)) for name in names}
        for kernel in kernels.values():
            kernel.json("print(1)")  # each kernel started and answering
        opened = students_pss(uids)  # server and an idle kernel, no PostgreSQL yet
        outcomes: dict[str, tuple[float, str | None]] = {}

        def run(name):
            try:
                outcomes[name] = kernels[name].run_lab(lab)
            except Exception as failure:  # noqa: BLE001 - printed below
                outcomes[name] = (0.0, f"{type(failure).__name__}: {failure}")

        sampler = Sampler(uids, every)
        sampler.start()
        started = time.monotonic()
        threads = [threading.Thread(target=run, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        sampler.stop()
        time.sleep(5)
        idle = students_pss(uids)  # kernel open, PostgreSQL up, nothing running
        runs = {name: records.list_runs(Path(harness.system_user(name).pw_dir) / ".local" / "share" / "labkit" / "results",
                                        notebook=lab.stem) for name in names}
        done = {name: sum(run.transactions or 0 for run in runs[name]) for name in names}

    print(f"\n{size} student{'s' if size > 1 else ''} running {lab.stem} at once ({profile} profile), "
          f"all done in {wall:.0f} s:")
    print("  student   lab s   peak MiB   before MiB   idle after MiB   transactions   result")
    for name in names:
        seconds, error = outcomes.get(name, (0.0, "no result"))
        print(f"  {name:<8}{seconds:>6.0f}{sampler.peak[name] / MIB:>11.0f}{opened[name] / MIB:>13.0f}"
              f"{idle[name] / MIB:>17.0f}{done[name]:>15,}   {'passed' if error is None else 'FAILED: ' + error[:120]}")
        for run in runs[name]:
            if run.errors or run.aborted_clients or not run.transactions:
                print(f"      run {run.name}: {run.transactions or 0} transactions, {run.aborted_clients} of {run.clients} "
                      f"clients aborted; {'; '.join(run.errors)[:300]}")
    print(f"  the students' peaks added up (each at its own moment): {sum(sampler.peak.values()) / MIB:.0f} MiB; the machine's used memory "
          f"rose by at most {(sampler.machine_peak - baseline) / MIB:.0f} MiB")
    print(f"  median lab {statistics.median(o[0] for o in outcomes.values()):.0f} s; the sampler took "
          f"{sampler.cpu_s:.1f} s of CPU over {sampler.samples} samples")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", nargs="+", default=["02-flash-sale"], help="notebook names, without .ipynb")
    parser.add_argument("--students", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--profile", default="ci")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between memory samples")
    args = parser.parse_args()
    # A kill (SIGTERM) leaves through the hub's clean-up too: its servers stopped, its users removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped"))
    reason = harness.why_not()
    if reason:
        sys.exit(f"cannot run a hub here: {reason}")
    cores, memory = len(psutil.Process().cpu_affinity()), psutil.virtual_memory().total
    print(f"this machine: {cores} CPUs, {memory / 2**30:.1f} GiB")
    for name in args.labs:
        for size in args.students:
            one_class(size, harness.ROOT / "notebooks" / f"{name}.ipynb", args.profile, args.every)


if __name__ == "__main__":
    main()
