"""The run record: every pgbench run, saved as one JSON file so runs compare across sessions.

A record holds what was run (scripts, clients, options, server settings), what pgbench
reported (tps, latencies, failures), what labkit measured beside it (wall-clock time and
overrun past ``-T``, the per-second and 100 ms series, probe samples) and an ``extra``
dict for each experiment's own figures (goodput, HOT ratio, ...).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import warnings
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path

from . import config
from .config import ENCODING
from .errors import LabkitError, UsageError
from .phases import Phases, progress_intervals

PARTS = ("start", "steady", "tail")

FORMAT = 2  # 2: the run's phases, its steady and whole-run figures, repeats


@dataclass
class Run:
    """One pgbench run and everything measured about it."""

    name: str
    notebook: str
    profile: str
    started_at: str
    server: dict = field(default_factory=dict)  # version, backend, settings
    scripts: list[dict] = field(default_factory=list)  # name, text, weight
    clients: int = 1
    jobs: int = 1
    duration_s: float | None = None
    transactions_per_client: int | None = None
    mode: str = "simple"
    argv: list[str] = field(default_factory=list)
    wall_s: float | None = None  # from pgbench's start to its exit
    overrun_s: float | None = None  # the tail: seconds past -T while the last transactions finished
    tps: float | None = None  # over the steady phase (pgbench's own figure for the whole run: whole["tps"])
    latency_ms: dict = field(default_factory=dict)  # avg, stddev, p50, p95, p99, max, over the steady phase
    transactions: int | None = None
    failures: int = 0
    serialization_failures: int | None = None  # failed transactions by kind (pgbench 15+, None before)
    deadlock_failures: int | None = None
    retried: int | None = None  # transactions that needed more than one try (--max-tries)
    retries: int | None = None
    aborted_clients: int = 0
    errors: list[str] = field(default_factory=list)
    interrupted: bool = False
    per_second: list[dict] = field(default_factory=list)  # t, tps, lat_ms, stddev_ms, failed
    fine: list[dict] = field(default_factory=list)  # 100 ms bins: t, tps, p99_ms, max_ms
    fine_width_s: float | None = None
    stalls: list[dict] = field(default_factory=list)  # start, end (seconds from run start), in the steady phase
    probes: dict = field(default_factory=dict)  # probe name -> list of samples {t, ...}
    statements: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)  # labkit.phases.Phases: start, steady, tail
    steady: dict = field(default_factory=dict)  # seconds, transactions, tps, failures, latency_ms, source
    whole: dict = field(default_factory=dict)  # pgbench's own figures for the whole run: tps, transactions, latency_ms
    repeat: int | None = None  # this run's place among the repeats of one cell (1, 2, ...)
    repeats: int | None = None  # how many repeats the cell asked for
    series: str | None = None  # shared by the repeats of one cell: they are kept together
    experiment: str | None = None  # shared by every run of one experiment (labkit.experiment), its arms interleaved
    order: int | None = None  # this run's place in its experiment's order (1, 2, ...)
    format: int = FORMAT
    path: str | None = None

    # -- what students look at

    @property
    def label(self) -> str:
        return f"{self.name} (c={self.clients})"

    def summary(self) -> dict:
        """The figures of the closing table."""
        row = {
            "run": self.name,
            "clients": self.clients,
            "tps": _round(self.tps),
            "pgbench_tps": _round(self.whole.get("tps")),  # pgbench's own, over the whole run (the articles' figure)
            "transactions": self.transactions,
            "failures": self.failures,
        }
        for key in ("avg", "p50", "p95", "p99", "max"):
            row[f"lat_{key}_ms"] = _round(self.latency_ms.get(key), 3)
        row["stall_s"] = self.stall_seconds
        row["steady_s"] = self.phases.get("steady_s")
        row["wall_s"] = _round(self.wall_s, 1)
        if self.overrun_s:
            row["overrun_s"] = _round(self.overrun_s, 1)
        if self.repeats and self.repeats > 1:
            row["repeat"] = f"{self.repeat}/{self.repeats}"
        for key, value in self.extra.items():
            if isinstance(value, (int, float, str)) or value is None:
                row[key] = _round(value) if isinstance(value, float) else value
        return row

    def to_frame(self, part: str | None = None):
        """The per-second series as a DataFrame (one row per progress line), with the ``phase`` each falls in.

        ``part`` keeps one phase: ``"steady"`` (what the run's figures are over), ``"start"`` or ``"tail"``.
        """
        import pandas as pd

        parts = self.phase_parts()
        rows = [{**point, "phase": parts.interval_part(start, end) if parts else "steady"}
                for start, end, point in progress_intervals(self.per_second)]
        frame = pd.DataFrame(rows)
        if part is not None:
            if part not in PARTS:
                raise UsageError(f"part={part!r}: use one of {', '.join(PARTS)}.")
            frame = frame[frame["phase"] == part] if not frame.empty else frame
        return frame

    def phase_parts(self) -> Phases | None:
        """The run's phases (None for a record written before labkit knew them)."""
        return Phases.from_dict(self.phases) if self.phases else None

    def phase_of(self, t: float) -> str:
        """``start``, ``steady`` or ``tail``: the part of the run an instant falls in."""
        parts = self.phase_parts()
        return parts.part(t) if parts else "steady"

    def phases_sentence(self) -> str:
        """The run's start, steady phase and tail in one line."""
        parts = self.phase_parts()
        return f"{self.name}: " + (parts.sentence() if parts else "no phases recorded (an older record).")

    def probe_frame(self, name: str):
        """One probe's samples as a DataFrame (``t`` is seconds since the run started)."""
        import pandas as pd

        if name not in self.probes:
            known = ", ".join(self.probes) or "none"
            raise UsageError(f"This run has no probe named {name!r} (it has: {known}).")
        return pd.DataFrame(self.probes[name])

    def __repr__(self) -> str:
        tps = f"{self.tps:,.0f} tps" if self.tps is not None else "no tps"
        return f"<Run {self.name!r} of {self.notebook}: {self.clients} clients, {tps}, {self.started_at}>"

    def _repr_html_(self) -> str:
        import pandas as pd

        return pd.DataFrame([self.summary()]).to_html(index=False)

    def peak(self, probe: str, column: str):
        """The largest value a probe's column reached during the run (None if never sampled).

        >>> Run("r", "nb", "ci", "now", probes={"gin": [{"t": 0.5, "pages": 3}, {"t": 1.0, "pages": 9}]}).peak("gin", "pages")
        9
        """
        values = [row[column] for row in self.probes.get(probe) or [] if row.get(column) is not None]
        return max(values) if values else None

    @property
    def stall_seconds(self) -> float:
        """Seconds of the steady phase spent in stalls (per-second TPS below 10% of its median)."""
        return round(sum(s["end"] - s["start"] for s in self.stalls), 1)

    def note(self, **figures) -> Run:
        """Add figures to ``extra`` and save the record again, e.g. ``run.note(stock_after=0)``.

        The record is written whole or not at all: when it cannot be (a full disk), the saved
        file keeps what it held and the error says so.
        """
        self.extra.update(figures)
        if self.path:
            self.save(Path(self.path).parent)
        return self

    # -- storage

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("path")
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Run:
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    def save(self, directory: Path | None = None) -> Path:
        """Write the record as JSON (again to its own file once saved): ``<notebook>--<name>--<time>[-n].json``.

        Two runs of one name within a second get two files, never one: the second takes the
        first free ``-2``, ``-3`` ... A results folder that exists keeps its own permissions; one
        made here is private to its owner. A file is written whole or not at all (a reader, or
        a full disk, never leaves half a record): a record saved before keeps what it held.
        """
        directory = Path(directory or config.results_dir())
        if not directory.exists():
            config.private_dir(directory, 0o700)
        text = json.dumps(self.to_dict(), indent=1, default=str, ensure_ascii=False)
        try:
            if self.path and Path(self.path).parent == directory:
                path = config.write_private(Path(self.path), text)
            else:
                path = _new_file(directory, f"{slug(self.notebook)}--{slug(self.name)}--"
                                            f"{self.started_at.replace(':', '').replace('-', '')[:15]}", text)
        except OSError as error:
            kept = f"{self.path} keeps what it held" if self.path else "nothing was written"
            raise LabkitError(f"Could not save the record of run {self.name!r} in {directory} "
                              f"({error.strerror or error}): {kept}. Free some space there (or set LABKIT_RESULTS "
                              "to another folder), then save it again with run.save() (lab.last_run.save() for the "
                              "last run).") from None
        self.path = str(path)
        return path

    @classmethod
    def load(cls, path: Path | str) -> Run:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding=ENCODING))
            run = cls.from_dict(data)
        except (OSError, ValueError, TypeError, AttributeError) as error:
            raise UsageError(f"{path} is not a readable run record: {error}") from None
        if not isinstance(run.format, int) or run.format > FORMAT:
            raise UsageError(f"{path} was written by a newer labkit (record format {run.format}; this one reads "
                             f"{FORMAT}): update labkit to read it.")
        run.path = str(path)
        return run


def _new_file(directory: Path, stem: str, text: str) -> Path:
    """Create ``stem.json`` (or ``stem-2.json`` ...) that did not exist, owner-only, holding ``text`` whole.

    The text is written to a private file of its own first, which then takes the first free
    name: a hard link, which fails on a name that exists (two kernels never share a file), or
    where the drive has none (FAT), a name claimed empty and then replaced.
    """
    partial = config.write_private(directory / f".{stem}.{secrets.token_hex(4)}.partial", text)
    try:
        for number in range(1, 10_000):
            path = directory / (f"{stem}.json" if number == 1 else f"{stem}-{number}.json")
            try:
                os.link(partial, path)
                return path
            except FileExistsError:
                continue
            except OSError:  # no hard links on this drive
                pass
            try:
                with open(path, "x", encoding=ENCODING):  # exclusive: the name is this run's
                    pass
            except FileExistsError:
                continue
            os.replace(partial, path)
            return path
    finally:
        partial.unlink(missing_ok=True)
    raise UsageError(f"{directory} holds 10,000 records of {stem}: move some elsewhere (LABKIT_RESULTS).")


def _round(value, digits: int = 1):
    return None if value is None else round(value, digits)


def slug(text: str) -> str:
    """A file-name-safe form of ``text``.

    >>> slug("02-flash sale/Plain!")
    '02-flash-sale-plain'
    """
    return re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-") or "run"


def now_iso() -> str:
    """Now, to the microsecond: two runs started in one second still sort in the order they ran."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


class UnreadableRecord(UserWarning):
    """A saved record that cannot be read: said at every listing, not once per place (Python's default)."""


warnings.filterwarnings("always", category=UnreadableRecord)


def list_runs(directory: Path | None = None, *, notebook: str | None = None, name: str | None = None) -> list[Run]:
    """Saved runs, oldest first, optionally of one notebook and/or one run name."""
    directory = directory or config.results_dir()
    if not directory.exists():
        return []
    runs = []
    for path in sorted(directory.glob("*.json")):
        try:
            run = Run.load(path)
        except UsageError as error:
            warnings.warn(f"{error.short} (left out of the runs listed)", UnreadableRecord, stacklevel=2)
            continue
        if notebook and run.notebook != notebook:
            continue
        if name and run.name != name:
            continue
        runs.append(run)
    runs.sort(key=order)
    return runs


def order(run: Run) -> tuple[datetime, int]:
    """When a run started (records written before microseconds count from their second), then its repeat.

    >>> a, b = Run("r", "nb", "ci", "2026-11-26T10:00:00+00:00"), Run("r", "nb", "ci", "2026-11-26T10:00:00.000001+00:00")
    >>> order(a) < order(b)
    True
    """
    try:
        started = datetime.fromisoformat(run.started_at)
    except ValueError:
        started = datetime.min.replace(tzinfo=UTC)
    return started, run.repeat or 0


def latest(runs: list[Run]) -> dict[str, Run]:
    """The newest run of each name."""
    newest: dict[str, Run] = {}
    for run in runs:
        newest[run.name] = run
    return newest


def latest_groups(runs: list[Run]) -> dict[str, Repeats]:
    """The newest repeats of each name: the runs of its newest series (one run, when it was not repeated)."""
    newest = latest(runs)
    return {name: Repeats(r for r in runs if r.name == name and (r is run or (run.series and r.series == run.series)))
            for name, run in newest.items()}


class Repeats(list):
    """The repeats of one cell (a list of :class:`Run`, oldest first): each figure as their mean and range.

    >>> group = Repeats([Run("plain", "nb", "ci", "now", tps=t, repeat=i, repeats=2) for i, t in ((1, 90.0), (2, 110.0))])
    >>> group.tps, group.spread("tps")
    (100.0, (90.0, 110.0))
    """

    @property
    def name(self) -> str:
        return self[0].name if self else ""

    @property
    def clients(self) -> int:
        return self[0].clients if self else 0

    @property
    def last(self) -> Run:
        """The newest repeat (``lab.check`` notes there)."""
        return self[-1]

    def values(self, metric: str = "tps") -> list[float]:
        from .verdict import value

        return [v for v in (value(run, metric) for run in self) if v is not None]

    def mean(self, metric: str = "tps") -> float | None:
        values = self.values(metric)
        return round(sum(values) / len(values), 3) if values else None

    def spread(self, metric: str = "tps") -> tuple[float, float] | None:
        """The lowest and highest value of ``metric`` across the repeats."""
        values = self.values(metric)
        return (min(values), max(values)) if values else None

    @property
    def tps(self) -> float | None:
        return self.mean("tps")

    def summary(self) -> dict:
        """The repeats' figures: each metric's mean, and its range across them."""
        row = {"run": self.name, "clients": self.clients, "repeats": len(self)}
        for metric in ("tps", "goodput", "lat_p99_ms"):
            low_high = self.spread(metric)
            if low_high is not None:
                row[metric] = round(self.mean(metric) or 0.0, 1)
                row[f"{metric} range"] = f"{low_high[0]:,.1f}–{low_high[1]:,.1f}"
        return row

    def _repr_html_(self) -> str:
        import pandas as pd

        each = pd.DataFrame([run.summary() for run in self]).to_html(index=False)
        return f"{each}<p>{len(self)} repeats: {self.summary()}</p>"


def waits_frame(runs: list[Run], *, during: str = "steady"):
    """Average backends per wait event during each run (rows: wait events, columns: runs).

    ``during`` picks the samples: ``"steady"`` (the steady phase, the default), ``"stalls"``
    (inside the steady phase's stalls), ``"outside-stalls"`` (the steady phase less its stalls),
    ``"start"``, ``"tail"``, or ``"all"``. A run with no sample in that part gets an empty column.
    Repeats of one name are averaged together.
    """
    import pandas as pd

    if during not in DURING:
        raise UsageError(f"during={during!r}: use one of {', '.join(repr(d) for d in DURING)}.")
    sums: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for run in runs:
        samples = [row for row in run.probes.get("waits") or [] if _in(run, row["t"], during)]
        counts[run.name] = counts.get(run.name, 0) + len({row["t"] for row in samples})
        totals = sums.setdefault(run.name, {})
        for row in samples:
            if row["wait"] != "idle":
                totals[row["wait"]] = totals.get(row["wait"], 0) + row["backends"]
    columns = {name: {wait: round(total / (counts[name] or 1), 1) for wait, total in totals.items()}
               for name, totals in sums.items()}
    frame = pd.DataFrame(columns).fillna(0.0)
    return frame.loc[frame.sum(axis=1).sort_values(ascending=False).index]


DURING = ("steady", "stalls", "outside-stalls", "start", "tail", "all")


def _in(run: Run, t: float, during: str) -> bool:
    """Whether instant ``t`` of ``run`` falls in the part ``during`` names."""
    if during == "all":
        return True
    part = run.phase_of(t)
    if during in PARTS:
        return part == during
    stalled = any(s["start"] <= t <= s["end"] for s in run.stalls)
    return part == "steady" and stalled == (during == "stalls")


def runs_frame(runs: list[Run]):
    import pandas as pd

    return pd.DataFrame([{"started_at": run.started_at, "notebook": run.notebook, **run.summary()} for run in runs])
