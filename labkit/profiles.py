"""Profiles scale an experiment to the machine: ``ci``, ``laptop`` and ``article``.

A notebook never hard-codes its sizes; it asks the profile::

    >>> p = Profile.named("ci")
    >>> p.pick(ci=20_000, laptop=100_000, article=1_000_000)
    20000
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError

NAMES = ("ci", "laptop", "article")


# Connections a lab uses besides its pgbench clients: probes, its sessions (T1, T2, ...), the
# observer, and another notebook open beside it.
SPARE_CONNECTIONS = 20


@dataclass(frozen=True)
class Profile:
    """How big, how long and how many clients."""

    name: str
    description: str
    max_connections: int
    clients: int
    duration_s: int
    shared_buffers: str
    largest_clients: int  # the most clients any lab runs under this profile: max_connections fits them
    repeats: int = 1  # runs of each key comparison, so that its verdict knows the run-to-run spread

    @classmethod
    def named(cls, name: str) -> Profile:
        try:
            return _PROFILES[name]
        except KeyError:
            raise UsageError(
                f"Unknown profile {name!r}: use one of {', '.join(NAMES)} "
                "(set LABKIT_PROFILE or pass profile=...)."
            ) from None

    def run_defaults(self) -> dict:
        """What a run takes when it does not say: this profile's clients and duration (``Spec`` fields)."""
        return {"clients": self.clients, "duration_s": self.duration_s}

    def pick(self, *, ci, laptop, article=None):
        """The value for this profile (``article`` falls back to ``laptop``)."""
        if self.name == "ci":
            return ci
        if self.name == "article" and article is not None:
            return article
        return laptop


_PROFILES = {
    "ci": Profile(
        "ci",
        "the whole suite in a few minutes on 2 cores: small tables, few clients, seconds-long runs",
        max_connections=300,
        clients=8,
        duration_s=4,
        shared_buffers="128MB",
        largest_clients=256,
        repeats=2,
    ),
    "laptop": Profile(
        "laptop",
        "each effect clearly visible within a couple of minutes on a 2-4 core laptop",
        max_connections=600,
        clients=16,
        duration_s=15,
        shared_buffers="256MB",
        largest_clients=512,
        repeats=3,
    ),
    "article": Profile(
        "article",
        "the articles' own parameters: hundreds to ~2,000 clients, minutes-long runs, a big machine",
        max_connections=2100,
        clients=64,
        duration_s=60,
        shared_buffers="1GB",
        largest_clients=1920,
        repeats=2,
    ),
}


def current() -> Profile:
    """The profile named by LABKIT_PROFILE; without it ``ci`` on Binder, else ``laptop``."""
    return Profile.named(default_name()[0])


def default_name(environ=None) -> tuple[str, str]:
    """The profile to use when none is passed, and where that choice comes from.

    A Binder session gets about one CPU, where ``laptop`` runs take several times longer, so
    a student who opens an instructor's Binder link gets ``ci`` without setting anything.

    >>> default_name({"LABKIT_PROFILE": "article"}), default_name({"BINDER_REPO_URL": "https://github.com/a/b"})
    (('article', 'LABKIT_PROFILE'), ('ci', 'Binder'))
    >>> default_name({})
    ('laptop', 'default')
    """
    from .binder import on_binder

    environ = os.environ if environ is None else environ
    named = environ.get("LABKIT_PROFILE", "").strip()
    if named:
        return named, "LABKIT_PROFILE"
    if on_binder(environ):
        return "ci", "Binder"
    return "laptop", "default"


def machine_size(root: Path | None = None, membership: str | None = None) -> tuple[float, int]:
    """CPUs and memory bytes this process may use: the container's limits (cgroup v2/v1) when set.

    On Binder and in containers, ``os.cpu_count()`` and the total memory are the host's; the
    cgroup limits are what the labs actually get.
    """
    import psutil

    cpus: float = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    memory = psutil.virtual_memory().total
    folders = cgroup_folders(root or CGROUP_ROOT, membership)
    quotas = [quota.split()[:2] for quota in (_read_first([str(f / "cpu.max")]) for f in folders)
              if quota and quota.split()[0] != "max"]
    if quotas:
        cpus = min([cpus] + [int(limit) / int(period) for limit, period in quotas])
    elif not folders:
        v1_quota, v1_period = _read_first(["/sys/fs/cgroup/cpu/cpu.cfs_quota_us"]), _read_first(["/sys/fs/cgroup/cpu/cpu.cfs_period_us"])
        if v1_quota and v1_period and int(v1_quota) > 0:
            cpus = min(cpus, int(v1_quota) / int(v1_period))
    limits = [_read_first([str(f / "memory.max")]) for f in folders] or [
        _read_first(["/sys/fs/cgroup/memory/memory.limit_in_bytes"])]
    for memory_limit in limits:
        if memory_limit and memory_limit.isdigit() and int(memory_limit) < memory:
            memory = int(memory_limit)
    return cpus, memory


CGROUP_ROOT = Path("/sys/fs/cgroup")


def limiting_cgroup(root: Path | None = None, membership: str | None = None) -> Path | None:
    """The cgroup v2 folder whose cpu.max limits this process most (None: no limit, or no cgroup v2).

    Its cpu.stat counts what everything under that limit used (another student's processes in a
    shared slice too), which is what the limit leaves idle.
    """
    best: tuple[float, Path] | None = None
    for folder in cgroup_folders(root or CGROUP_ROOT, membership):
        quota = (_read_first([str(folder / "cpu.max")]) or "max").split()
        if quota[0] != "max" and len(quota) > 1 and (best is None or int(quota[0]) / int(quota[1]) < best[0]):
            best = (int(quota[0]) / int(quota[1]), folder)
    return best[1] if best else None


def cgroup_folders(root: Path = CGROUP_ROOT, membership: str | None = None) -> list[Path]:
    """This process's cgroup v2 folder and those above it, innermost first ([] without cgroup v2).

    Inside a container with its own cgroup namespace the process's cgroup is the mount's root;
    on a host, or a container sharing the host's namespace, it is a folder below it, and a
    limit may be set on any folder on the way up: the tightest one holds.

    >>> import tempfile; top = Path(tempfile.mkdtemp()); (top / "a" / "b").mkdir(parents=True)
    >>> _ = (top / "cgroup.controllers").write_text("cpu memory")
    >>> [str(f.relative_to(top)) for f in cgroup_folders(top, "0::/a/b")]
    ['a/b', 'a', '.']
    """
    if not (root / "cgroup.controllers").exists():
        return []  # cgroup v1, or no cgroup file system (macOS, Windows)
    if membership is None:
        membership = _read_first(["/proc/self/cgroup"]) or ""  # posix-only: Linux's own file, read only there
    relative = next((line[3:].strip() for line in membership.splitlines() if line.startswith("0::")), "/")
    folder = root / relative.lstrip("/")
    if not folder.is_dir():
        folder = root  # the path is the host's, not visible here: the mount's root is ours
    folders = [folder]
    while folders[-1] != root and root in folders[-1].parents:
        folders.append(folders[-1].parent)
    return folders


def _read_first(paths: list[str]) -> str | None:
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError:
            continue
    return None


def fitting(cores: float, memory_bytes: int) -> str:
    """The profile that suits ``cores`` CPUs and ``memory_bytes`` of memory.

    >>> fitting(2, 8 * 2**30), fitting(8, 16 * 2**30), fitting(64, 256 * 2**30)
    ('ci', 'laptop', 'article')
    """
    gib = memory_bytes / 2**30
    if cores <= 2 or gib < 4:
        return "ci"
    if cores >= 32 and gib >= 64:
        return "article"
    return "laptop"


def for_class(students: int, cores: float, memory_bytes: int) -> str:
    """The profile for one of ``students`` running labs at once on a machine of ``cores`` CPUs and ``memory_bytes``.

    Each student gets an equal share of the machine; a shared machine never gets ``article``.

    >>> for_class(20, 16, 64 * 2**30), for_class(2, 16, 64 * 2**30), for_class(1, 64, 256 * 2**30)
    ('ci', 'laptop', 'laptop')
    """
    name = fitting(cores / max(students, 1), memory_bytes // max(students, 1))
    return "laptop" if name == "article" else name


def advise(cores: float | None = None, memory_bytes: int | None = None) -> str:
    """Which profile suits this machine (its container limits included), in one sentence.

    >>> advise(1, 2 * 2**30)
    "This machine gives the labs 1 CPU and 2.0 GiB: the 'ci' profile fits best (LABKIT_PROFILE=ci); 'laptop' works but runs slowly."
    >>> advise(64, 256 * 2**30)
    "This machine gives the labs 64 CPUs and 256 GiB: it can run the 'article' profile."
    """
    if cores is None or memory_bytes is None:
        found_cores, found_memory = machine_size()
        cores = cores or found_cores
        memory_bytes = memory_bytes or found_memory
    gib = memory_bytes / 2**30
    count = f"{cores:g} CPU" + ("" if cores == 1 else "s")
    name = fitting(cores, memory_bytes)
    if name == "ci":
        return (
            f"This machine gives the labs {count} and {gib:.1f} GiB: the 'ci' profile fits best "
            "(LABKIT_PROFILE=ci); 'laptop' works but runs slowly."
        )
    if name == "article":
        return f"This machine gives the labs {count} and {gib:.0f} GiB: it can run the 'article' profile."
    return f"This machine gives the labs {count} and {gib:.1f} GiB: the 'laptop' profile fits."
