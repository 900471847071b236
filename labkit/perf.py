"""perf, where the machine has it and allows it; a one-line reason where it does not."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import psutil

from . import style
from .errors import UsageError


@dataclass(frozen=True)
class Availability:
    available: bool
    message: str


CUTOFF_PCT = 0.3  # perf report leaves out symbols with less self time than this (percent)
FEW_SAMPLES = 300  # below this, one sample is a third of a percent or more: shares of a few percent are noise


@cache
def availability() -> Availability:
    """Whether ``perf record -e cpu-clock`` works here (checked once, by trying it)."""
    if sys.platform != "linux":
        return Availability(False, f"perf is Linux-only (this is {sys.platform}): labs fall back to wait-event sampling")
    binary = shutil.which("perf")
    if binary is None:
        return Availability(False, "perf is not installed (Debian/Ubuntu: apt-get install linux-perf); "
                                   "labs fall back to wait-event sampling")
    try:
        result = _try_record(binary)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Availability(False, f"perf did not run ({error}); labs fall back to wait-event sampling")
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["unknown reason"])[0]
        return Availability(False, f"perf is not permitted here ({reason}); labs fall back to wait-event sampling")
    return Availability(True, f"{binary} works with software events (-e cpu-clock)")


def _try_record(binary: str, *options: str) -> subprocess.CompletedProcess:
    """Whether this perf works here: ``perf record -e cpu-clock [options] -- true`` into a throw-away file."""
    with tempfile.TemporaryDirectory() as folder:
        return subprocess.run([binary, "record", "-q", "-e", "cpu-clock", *options, "-o", f"{folder}/probe.data",
                               "--", "true"], capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=20)


# ----------------------------------------------------------------------------- recording

CALL_GRAPH_NOTE = (
    "Call chains come from DWARF unwinding (--call-graph dwarf): the server is built without frame "
    "pointers, so plain -g would stop after one or two frames."
)
SELF_ONLY_NOTE = (
    "Self time per symbol only: this perf cannot unwind DWARF call chains, and the server is built "
    "without frame pointers, so plain -g chains would be cut short and misleading."
)


@cache
def dwarf_works() -> bool:
    """Whether ``perf record --call-graph dwarf`` works here (tried once on a short command)."""
    if not availability().available:
        return False
    try:
        return _try_record(shutil.which("perf") or "perf", "--call-graph", "dwarf,4096").returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class Recording:
    """``perf record -e cpu-clock`` attached to processes (a run's backends) while a run goes on.

    ``pids`` are the processes to record. With ``follow`` (a run that connects anew for each
    transaction: its backends come and go), perf attaches to the one process given (the server)
    and follows what it forks after attaching. ``stop()`` ends it and returns a
    :class:`CpuProfile` (or None when perf could not record: the reason is in ``message``).
    """

    def __init__(self, pids: int | list[int], *, frequency: int = 199, call_graph: bool = True, top: int = 60):
        self.pids = [pids] if isinstance(pids, int) else list(pids)
        self.frequency = frequency
        self.call_graph = call_graph and dwarf_works()
        self.top = top
        self.folder = Path(tempfile.mkdtemp(prefix="labkit-perf-"))
        self.output = self.folder / "perf.data"
        self.process: subprocess.Popen | None = None
        self.message = ""
        self.started = 0.0
        try:
            self.server_program = psutil.Process(self.pids[0]).exe()
        except (psutil.Error, IndexError):
            self.server_program = ""

    def argv(self) -> list[str]:
        graph = ["--call-graph", "dwarf,8192"] if self.call_graph else []
        # not -q: perf's reason for recording nothing ("No such process") is then in what it prints
        return [shutil.which("perf") or "perf", "record", "-e", "cpu-clock", "-F", str(self.frequency),
                *graph, "-p", ",".join(map(str, self.pids)), "-o", str(self.output)]

    def start(self) -> Recording:
        self.process = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, start_new_session=True)
        self.started = time.monotonic()
        return self

    def stop(self) -> CpuProfile | None:
        try:
            if self.process is None:
                return None
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)
            try:
                _, err = self.process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                _, err = self.process.communicate()
            if not self.output.exists() or self.output.stat().st_size == 0:
                self.message = nothing_recorded((err or b"").decode(errors="replace"), self.process.returncode,
                                                time.monotonic() - self.started)
                return None
            return self.report()
        finally:
            self.process = None

    def report(self) -> CpuProfile:
        perf = shutil.which("perf") or "perf"
        base = [perf, "report", "-i", str(self.output), "--stdio", "--sort", "dso,symbol", "-g", "none", "-n",
                "--percent-limit", str(CUTOFF_PCT)]
        text = _run([*base, "--children" if self.call_graph else "--no-children"])
        symbols = parse_report(text)
        folded = {}
        if self.call_graph:
            folded = fold_script(_run([perf, "script", "-i", str(self.output), "-F", "comm,ip,sym"]), limit=FOLDED_KEPT)
        # one line a sample: the exact count (the report's header rounds it, "1K")
        samples = count_samples(_run([perf, "script", "-i", str(self.output), "-F", "tid"])) or _sample_count(text)
        symbols.sort(key=lambda row: (-row["self"], -(row["children"] or 0)))
        note = CALL_GRAPH_NOTE if self.call_graph else SELF_ONLY_NOTE
        if any(character.isspace() for character in self.server_program):
            note += (f" The server runs from {self.server_program}, a path with a space, which perf cannot read: "
                     "its functions show as bare addresses. Install the labs in a folder without spaces to see names.")
        return CpuProfile(symbols=keep_top(symbols, self.top), folded=folded, samples=samples,
                          call_graph="dwarf" if self.call_graph else "none", note=note)

    def cleanup(self) -> None:
        """Stop perf if it still runs (an error before the run ended) and delete its data."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def nothing_recorded(stderr: str, returncode: int | None, ran_s: float) -> str:
    """Why perf left no data, in one line (no final stop: it is said inside other sentences).

    Its own words, else how it ended and after how long.

    perf prints nothing of its own when it is stopped before it has set itself up (a SIGINT then
    ends it as it would any program): how long it ran is then the reason to give. Its lines of a
    recording that went well ("[ perf record: ...]") are left out.

    >>> nothing_recorded("", -2, 0.4)
    'perf recorded nothing: it was stopped 0.4 s after it started (by SIGINT), before it had written any sample; perf can take seconds to start on a busy machine: run longer'
    >>> nothing_recorded("Couldn't create thread/CPU maps: No such process\\n", 244, 0.3)
    "perf recorded nothing (Couldn't create thread/CPU maps: No such process; exit code 244)"
    """
    said = " ".join(" ".join(line.split()) for line in stderr.splitlines()
                    if line.strip() and not line.startswith("[ perf record:"))[:200]
    if returncode is None:
        ended = "still running"
    elif returncode < 0:
        try:
            ended = f"by {signal.Signals(-returncode).name}"
        except ValueError:
            ended = f"by signal {-returncode}"
    else:
        ended = f"exit code {returncode}"
    if said:
        return f"perf recorded nothing ({said}; {ended})"
    return (f"perf recorded nothing: it was stopped {ran_s:.1f} s after it started ({ended}), before it had "
            "written any sample; perf can take seconds to start on a busy machine: run longer")


FOLDED_KEPT = 500  # the most frequent call chains a record keeps (the rest are summed in no chain)


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=300).stdout


def count_samples(script: str) -> int:
    """Samples in ``perf script -F tid`` output: one line each.

    >>> count_samples("  17188 \\n  17204 \\n\\n")
    2
    """
    return sum(1 for line in script.splitlines() if line.strip())


@dataclass
class CpuProfile:
    """Where the recorded processes spent their CPU time."""

    symbols: list[dict]  # symbol, dso, self (%), children (% or None); most self time first
    folded: dict[str, int]  # "outer;...;leaf" -> samples (only with call chains)
    samples: int | None
    call_graph: str
    note: str

    def to_dict(self) -> dict:
        return asdict(self)


_REPORT_LINE = re.compile(r"^\s+(?P<first>[\d.]+)%\s+(?:(?P<second>[\d.]+)%\s+)?(?:(?P<count>\d+)\s+)?(?P<dso>\S+)\s+"
                          r"\[(?P<kind>.)\]\s+(?P<symbol>.+?)\s*$")
_TRAILING_DASHES = re.compile(r"(\s+-)+$")
_SAMPLES = re.compile(r"^# Samples: (?P<n>[\d.]+)(?P<unit>[KM]?)\s+of event")


def parse_report(text: str) -> list[dict]:
    """Rows of ``perf report --stdio --sort dso,symbol -g none`` (with or without ``--children``, ``-n``).

    With ``-n`` each row also has its self samples (``samples``), the count its share is made of.

    >>> parse_report('''
    ... # Children      Self  Shared Object  Symbol
    ...     27.66%    27.54%  postgres       [.] s_lock                -      -
    ...      0.50%     0.00%  [kernel.kallsyms]  [k] entry_SYSCALL_64
    ... ''')
    [{'symbol': 's_lock', 'dso': 'postgres', 'kind': 'user', 'self': 27.54, 'children': 27.66}, {'symbol': 'entry_SYSCALL_64', 'dso': '[kernel.kallsyms]', 'kind': 'kernel', 'self': 0.0, 'children': 0.5}]
    >>> parse_report("    99.15%     0.48%             4  libpython3.11.so.1.0  [.] _PyEval_EvalFrameDefault   -   -")
    [{'symbol': '_PyEval_EvalFrameDefault', 'dso': 'libpython3.11.so.1.0', 'kind': 'user', 'self': 0.48, 'children': 99.15, 'samples': 4}]
    """
    rows = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = _REPORT_LINE.match(line)
        if not match:
            continue
        first, second = float(match["first"]), match["second"]
        symbol = _TRAILING_DASHES.sub("", match["symbol"])  # perf 6 adds empty IPC columns ("-  -")
        row = {"symbol": symbol, "dso": match["dso"], "kind": "kernel" if match["kind"] == "k" else "user"}
        if second is None:
            row.update({"self": first, "children": None})
        else:
            row.update({"self": float(second), "children": first})
        if match["count"] is not None:
            row["samples"] = int(match["count"])
        rows.append(row)
    return rows


def keep_top(symbols: list[dict], top: int) -> list[dict]:
    """The ``top`` symbols by self time and the ``top`` by time with their callees, most self time first.

    A function that calls others (``GetSnapshotData`` around its lock) can spend little time in its
    own code and much below it: keeping only the first list would leave it out.

    >>> rows = [{"symbol": "leaf", "self": 9.0, "children": 9.0}, {"symbol": "caller", "self": 0.1, "children": 30.0},
    ...         {"symbol": "other", "self": 1.0, "children": 1.0}]
    >>> [row["symbol"] for row in keep_top(rows, 1)]
    ['leaf', 'caller']
    """
    by_self = sorted(symbols, key=lambda row: -row["self"])
    by_children = sorted(symbols, key=lambda row: -(row["children"] or 0))[:top]
    kept = {id(row) for row in by_self[:top] + by_children}
    return [row for row in by_self if id(row) in kept]


def _sample_count(text: str) -> int | None:
    """The report header's sample count: exact below 1,000, then rounded ("1K": 1,000 to 1,499, say)."""
    for line in text.splitlines():
        match = _SAMPLES.match(line)
        if match:
            return int(float(match["n"]) * {"": 1, "K": 1_000, "M": 1_000_000}[match["unit"]])
    return None


def fold_script(text: str, *, limit: int | None = None) -> dict[str, int]:
    """Fold ``perf script -F comm,ip,sym`` output into ``outer;...;leaf -> samples`` (flame-graph input).

    Each sample is a line with the command, then one line per frame (address, symbol), leaf first.

    >>> fold_script('''postgres
    ... \t 4a1f2 s_lock
    ... \t 4b000 LWLockAcquire
    ... \t 46fa5d PostgresMain
    ...
    ... postgres
    ... \t 4a1f2 s_lock
    ... \t 4b000 LWLockAcquire
    ... \t 46fa5d PostgresMain
    ... ''')
    {'PostgresMain;LWLockAcquire;s_lock': 2}
    """
    counts: dict[str, int] = {}
    frames: list[str] = []

    def flush():
        if frames:
            key = ";".join(reversed(frames))
            counts[key] = counts.get(key, 0) + 1
            frames.clear()

    for line in text.splitlines():
        if not line.strip():
            flush()
        elif line[0] in " \t":
            parts = line.split(None, 1)
            frames.append(parts[1].strip() if len(parts) > 1 else "[unknown]")
        else:
            flush()
    flush()
    ordered = sorted(counts.items(), key=lambda item: -item[1])
    return dict(ordered[:limit] if limit else ordered)


def figures(recording: Recording | None, reason: str | None) -> dict:
    """What a run keeps in ``extra.perf``: the profile, or in one line why there is none.

    A recording with no sample of the run's processes is said so, never stored as a profile:
    ``available`` is True only when there are samples to read.
    """
    if recording is None:
        return {"available": False, "message": reason or "perf was not started"}
    try:
        profile = recording.stop()
    except subprocess.TimeoutExpired as error:
        return {"available": False, "message": f"perf report took longer than {error.timeout:.0f} s: the run is kept "
                                               "without its profile (a shorter run, or fewer clients, records less)"}
    except OSError as error:
        return {"available": False, "message": f"perf could not report ({error}): the run is kept without its profile"}
    if profile is None:
        return {"available": False, "message": recording.message}
    if not profile.samples or not profile.symbols:
        return {"available": False, "message": f"perf recorded no samples of the run's backends ({len(recording.pids)} "
                                               "process(es) attached): the run was too short or the machine too busy "
                                               "for perf to attach in time; wait events only"}
    return {"available": True, **profile.to_dict()}


# ----------------------------------------------------------------------------- what students look at


def profile_of(run) -> dict:
    """The run's ``extra.perf``, or a clear error if the run was not profiled."""
    figures = run.extra.get("perf")
    if figures is None:
        raise UsageError(f"Run {run.name!r} was not profiled: run it with perf=True.")
    return figures


def table(run, *, top: int = 12):
    """The top symbols of a profiled run: self and children percentages of the CPU samples, and the self samples.

    Where perf was not available, a one-row frame with the reason. The frame's ``attrs["support"]``
    is :func:`support`'s sentence: how many samples the shares rest on.
    """
    import pandas as pd

    figures = profile_of(run)
    if not figures.get("available") or not figures.get("symbols"):
        return pd.DataFrame([{"perf": figures.get("message", "perf recorded no symbols")}])
    frame = pd.DataFrame(figures["symbols"][:top])
    columns = ["symbol", "dso", "self", "children"] + (["samples"] if "samples" in frame else [])
    frame = frame[columns].rename(columns={"self": "self %", "children": "children %", "samples": "self samples"})
    frame.attrs["support"] = support(run)
    return frame


def support(run) -> str:
    """What a run's shares rest on, in one sentence: its samples, what one sample weighs, and too few when so.

    >>> from labkit.records import Run
    >>> print(support(Run("p", "nb", "ci", "now", extra={"perf": {"available": True, "samples": 87, "symbols": [{}]}})))
    p: 87 CPU samples of the run's backends (one sample is 1.15 points of a share): too few to read a share of a few percent; run longer or with more clients.
    """
    figures = profile_of(run)
    if not figures.get("available"):
        return f"{run.name}: no profile ({figures.get('message', 'perf recorded nothing')})."
    samples = figures.get("samples") or 0
    weight = 100.0 / samples if samples else 0.0
    said = f"{run.name}: {samples:,} CPU samples of the run's backends (one sample is {weight:.2f} points of a share)"
    if samples < FEW_SAMPLES:
        return said + ": too few to read a share of a few percent; run longer or with more clients."
    return said + "."


def callers(run, symbol: str) -> object:
    """Who calls ``symbol`` in a profiled run's call chains: each caller's samples and share of all samples.

    The question "which lock is it" is answered by the callers: ``LWLockAcquire`` under
    ``GetSnapshotData`` is ProcArrayLock, under ``read_seq_tuple`` the sequence's buffer. A chain
    holding the symbol twice counts once, at its outermost call. Read from the call chains the
    record keeps (the most frequent ones, :data:`FOLDED_KEPT`): ``attrs["kept"]`` says how many
    samples those chains hold of the run's.
    """
    import pandas as pd

    figures = profile_of(run)
    folded = figures.get("folded") or {}
    if not figures.get("available") or not folded:
        raise UsageError(f"Run {run.name!r} has no call chains: {figures.get('message') or figures.get('note', '')}")
    counts: dict[str, int] = {}
    for stack, count in folded.items():
        frames = stack.split(";")
        if symbol in frames:
            at = frames.index(symbol)
            caller = frames[at - 1] if at else "(the chain's root)"
            counts[caller] = counts.get(caller, 0) + count
    total = figures.get("samples") or sum(folded.values())
    frame = pd.DataFrame([{"caller": caller, "samples": count, "share %": round(100.0 * count / total, 2)}
                          for caller, count in sorted(counts.items(), key=lambda item: -item[1])],
                         columns=["caller", "samples", "share %"])
    frame.attrs["kept"] = f"{sum(folded.values()):,} of the run's {total:,} samples are in the chains kept"
    return frame


def recorded(run) -> bool:
    """Whether perf recorded samples of this run (a profile with symbols to read)."""
    figures = profile_of(run)
    return bool(figures.get("available") and figures.get("samples") and figures.get("symbols"))


def share(run, symbol: str, *, inclusive: bool = False) -> float | None:
    """Self time of ``symbol`` in a profiled run, in percent; with ``inclusive``, its time with its callees'.

    None when perf did not record the run (or recorded no call chains, for ``inclusive``), or when
    the symbol is below the report's cut-off (:data:`CUTOFF_PCT`): perf leaves such symbols out,
    so their share is small but unknown, not 0.
    """
    figures = profile_of(run)
    if not figures.get("available"):
        return None
    column = "children" if inclusive else "self"
    return next((row[column] for row in figures["symbols"] if row["symbol"] == symbol), None)


@style.styled
def icicle(run, *, depth: int = 14, title: str | None = None):
    """An icicle (a flame graph drawn top-down) of a profiled run's call chains; self time as bars without them."""
    import plotly.graph_objects as go

    figures = profile_of(run)
    if not figures.get("available"):
        return go.Figure().update_layout(title=f"{run.name}: {figures.get('message')}")
    folded = figures.get("folded") or {}
    if not folded:
        rows = figures["symbols"][:15][::-1]
        figure = go.Figure(go.Bar(x=[r["self"] for r in rows], y=[r["symbol"] for r in rows], orientation="h"))
        return figure.update_layout(title=title or f"{run.name}: self time per symbol (%)", template="plotly_white",
                                    height=460, xaxis_title="% of CPU samples")
    values: dict[str, int] = {}
    for stack, count in folded.items():
        frames = stack.split(";")
        frames = frames[:1] + frames[-(depth - 1):] if len(frames) > depth else frames  # keep the leaves
        for end in range(1, len(frames) + 1):
            key = ";".join(frames[:end])
            values[key] = values.get(key, 0) + count
    ids = list(values)
    figure = go.Figure(go.Icicle(
        ids=ids, labels=[key.rsplit(";", 1)[-1] for key in ids],
        parents=[key.rsplit(";", 1)[0] if ";" in key else "" for key in ids],
        values=[values[key] for key in ids], branchvalues="total", tiling=dict(orientation="v"),
        hovertemplate="%{label}<br>%{value} samples (%{percentRoot:.1%})<extra></extra>",
    ))
    return figure.update_layout(title=title or f"{run.name}: where the CPU time went (call chains, root at the top)",
                                margin=dict(t=50, l=10, r=10, b=10), height=560)
