"""How sure a comparison is: two groups of runs, one metric, a ratio with its spread and a sentence (pure logic).

A run on a laptop, on Binder's one CPU or on a class server is noisy: the same script run
twice can differ by tens of percent. :func:`compare` sets two groups of runs (the repeats of two
names) side by side on one metric and says whether the difference stands beyond the spread:

- with two or more runs in each group, the spread is **run to run**: each group's lowest to
  highest value. The difference *stands* when the two ranges do not overlap and the means
  differ by more than the wider range (by twice that with only two runs in a group). Under pure
  noise (normal, both groups alike) this calls about 5% of comparisons beyond the spread with
  three runs each, 8% with two each; a difference of four standard deviations stands in about
  93% and 68% of them. Two runs are a first look, and the sentence says so;
- with one run in a group, the only spread known is **second to second** within that run (the
  10th to 90th percentile of its steady per-second tps): the verdict says so, and that repeats
  would tell more. A figure with no spread at all (one run, and no per-second values for it)
  never stands: its spread is unknown.

:func:`limits` reads what held the runs back from their own records (the CPU split, the wait
events of their clients), once per name with its range across the repeats, so that a verdict
also says when a ratio is the client's or the machine's rather than the server's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .cpu import findings as cpu_findings
from .cpu import sentence as cpu_sentence
from .phases import Phases, in_part
from .records import Run

WAIT_SHARE = 0.25  # a wait class matters from this share of the run's clients


@dataclass(frozen=True)
class Verdict:
    """Group ``b`` against group ``a`` on one metric: a ratio, its spread, and whether it stands beyond it."""

    metric: str
    a: str
    b: str
    a_values: list[float]
    b_values: list[float]
    ratio: float | None  # mean of b / mean of a
    low: float | None  # the ratio's spread: b's lowest over a's highest ...
    high: float | None  # ... to b's highest over a's lowest
    stands: bool
    basis: str  # "repeats" (run to run) or "seconds" (second to second within one run each)
    limits: list[str] = field(default_factory=list)
    sentence: str = ""

    def __str__(self) -> str:
        return self.sentence

    def _repr_html_(self) -> str:
        import html

        return f"<p>{html.escape(self.sentence)}</p>"


def value(run: Run, metric: str) -> float | None:
    """A run's figure by name: ``tps``, ``goodput`` (or any ``extra`` figure), ``lat_avg_ms`` ... ``lat_max_ms``.

    >>> value(Run("r", "nb", "ci", "now", tps=10.0, latency_ms={"p99": 3.5}, extra={"goodput": 4.0}), "lat_p99_ms")
    3.5
    """
    if metric == "tps":
        return run.tps
    if metric.startswith("lat_") and metric.endswith("_ms"):
        return run.latency_ms.get(metric[4:-3])
    figure = run.extra.get(metric)
    return float(figure) if isinstance(figure, (int, float)) else None


def _seconds_spread(run: Run) -> tuple[float, float] | None:
    """The 10th and 90th percentile of a run's steady per-second tps (None: too few seconds)."""
    parts = Phases.from_dict(run.phases) if run.phases else None
    points = [p for _, _, p in in_part(run.per_second, parts)] if parts else run.per_second
    values = sorted(p["tps"] for p in points)
    if len(values) < 2:
        return None
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return deciles[0], deciles[-1]


def _range(runs: list[Run], metric: str) -> tuple[list[float], float, float, str] | None:
    """A group's values of ``metric``, their low and high, and what that spread is: repeats, seconds or unknown."""
    values = [v for v in (value(run, metric) for run in runs) if v is not None]
    if not values:
        return None
    if len(values) >= 2:
        return values, min(values), max(values), "repeats"
    spread = _seconds_spread(runs[0]) if metric == "tps" else None
    if spread is None:
        return values, values[0], values[0], "unknown"
    # the run's own figure stays inside its second-to-second range
    return values, min(spread[0], values[0]), max(spread[1], values[0]), "seconds"


def compare(a_runs: list[Run] | Run, b_runs: list[Run] | Run, *, metric: str = "tps") -> Verdict:
    """``b`` against ``a`` on ``metric``: the ratio of their means, its spread, and whether it stands.

    Interrupted runs are left out (their figures are of part of a run), and said so.

    >>> def runs(name, *tps): return [Run(name, "nb", "ci", "now", tps=t) for t in tps]
    >>> print(compare(runs("plain", 100, 110, 105), runs("skip", 300, 330, 320)))
    skip / plain, tps: 3.02× (2.73–3.30× across 3 and 3 runs): beyond the run-to-run spread.
    >>> print(compare(runs("plain", 100, 130), runs("skip", 120, 125)))
    skip / plain, tps: 1.07× (0.92–1.25× across 2 and 2 runs, a first look: 3 or more say more): within noise here: repeat, or lengthen the runs, or use the laptop profile.
    """
    a_all = [a_runs] if isinstance(a_runs, Run) else list(a_runs)
    b_all = [b_runs] if isinstance(b_runs, Run) else list(b_runs)
    a_name = a_all[0].name if a_all else "a"
    b_name = b_all[0].name if b_all else "b"
    cut = [run for run in a_all + b_all if run.interrupted]
    a_list = [run for run in a_all if not run.interrupted]
    b_list = [run for run in b_all if not run.interrupted]
    a_range, b_range = _range(a_list, metric), _range(b_list, metric)
    held = group_limits(a_list) + group_limits(b_list)
    head = f"{b_name} / {a_name}, {metric}: "
    tail = (f" ({len(cut)} interrupted run{'s' * (len(cut) != 1)} left out.)" if cut else "") + (
        " What held the runs back: " + "; ".join(held) + "." if held else "")
    if a_range is None or b_range is None:
        missing = a_name if a_range is None else b_name
        return Verdict(metric, a_name, b_name, a_range[0] if a_range else [], b_range[0] if b_range else [], None,
                       None, None, False, "none", held, f"{head}no comparison, {missing} has no {metric} figure." + tail)
    a_values, a_low, a_high, a_basis = a_range
    b_values, b_low, b_high, b_basis = b_range
    a_mean, b_mean = statistics.mean(a_values), statistics.mean(b_values)
    if not a_mean:
        return Verdict(metric, a_name, b_name, a_values, b_values, None, None, None, False, "none", held,
                       f"{head}no ratio: {a_name}'s {metric} is 0 (it completed no work to compare with)." + tail)
    ratio = b_mean / a_mean
    low = b_low / a_high if a_high else None
    high = b_high / a_low if a_low else None
    bases = {a_basis, b_basis}
    basis = "unknown" if "unknown" in bases else "repeats" if bases == {"repeats"} else "seconds"
    fewest = min(len(a_values), len(b_values))
    margin = 1.0 if basis != "repeats" or fewest >= 3 else 2.0
    apart = b_low > a_high or a_low > b_high
    stands = basis != "unknown" and apart and abs(b_mean - a_mean) > margin * max(a_high - a_low, b_high - b_low)
    spread = "" if low is None or high is None else f"{low:.2f}–{high:.2f}× "
    # the larger profile is advice only where the runs are of the smallest one
    larger = ", or use the laptop profile" if {run.profile for run in [*a_all, *b_all]} <= {"ci"} else ""
    if basis == "repeats":
        counted = f"across {len(a_values)} and {len(b_values)} runs" + (
            ", a first look: 3 or more say more" if fewest < 3 else "")
        judged = "beyond the run-to-run spread" if stands else (
            f"within noise here: repeat, or lengthen the runs{larger}")
    elif basis == "seconds":
        counted = "one run of at least one side: its spread is second to second"
        judged = ("beyond the second-to-second spread, but one run says nothing of run-to-run noise: repeat to be sure"
                  if stands else f"within the second-to-second spread: repeat, or lengthen the runs{larger}")
    else:
        spread, counted = "", "one run of at least one side, with no per-second figures"
        judged = "its spread is unknown, so this says nothing sure: repeat the runs"
    sentence = f"{head}{ratio:.2f}× ({spread}{counted}): {judged}." + tail
    return Verdict(metric, a_name, b_name, a_values, b_values, round(ratio, 4), None if low is None else round(low, 4),
                   None if high is None else round(high, 4), stands, basis, held, sentence)


WAITS = (("Client", "the client: its backends waited for pgbench's next statement"),
         ("Lock", "heavyweight lock waits"), ("LWLock", "LWLock waits"), ("IO", "I/O waits"))


def group_limits(runs: list[Run]) -> list[str]:
    """What held the runs of one name back, once per kind, with its range across them.

    >>> cpu = {"pgbench": 0.2, "backends": 0.3, "server_other": 0.0, "idle": 0.0, "cpus": 2, "threads": 1,
    ...        "pgbench_per_thread": 0.2, "seconds": 3}
    >>> group_limits([Run("r", "nb", "ci", "now", extra={"cpu": cpu}), Run("r", "nb", "ci", "now")])
    ['other processes on this machine used 1.5 of its 2 cores in 1 of 2 r runs (pgbench 0.2, the server 0.3)']
    """
    if not runs:
        return []
    name, count = runs[0].name, len(runs)
    found: dict[str, list[dict]] = {}
    for run in runs:
        for kind, values in cpu_findings(run.extra.get("cpu") or {}).items():
            found.setdefault(kind, []).append(values)
    sentences = [cpu_sentence(kind, values, name, count) for kind, values in found.items()]
    shares = [wait_shares(run) for run in runs]
    for kind, label in WAITS:
        if kind == "Client" and ({"no_cpu", "others"} & set(found)):
            # with no CPU to spare, a backend waiting for pgbench's next statement is as much pgbench
            # waiting for a core as pgbench's own limit: say what was seen, not a cause
            label = "its backends waited for pgbench's next statement, on a machine with no CPU to spare"
        seen = [share[kind] for share in shares if share.get(kind, 0.0) >= WAIT_SHARE]
        if seen:
            low, high = f"{min(seen):.0%}", f"{max(seen):.0%}"
            where = f"of {name}'s clients" if count == 1 else f"of the clients, in {len(seen)} of {count} {name} runs"
            sentences.append(f"{label} ({low if low == high else low[:-1] + '–' + high} {where}, on average)")
    return sentences


def limits(run: Run) -> list[str]:
    """What held one run back, from its own records: the client, other processes, the CPU, waits, I/O.

    >>> cpu = {"pgbench": 0.2, "backends": 0.3, "server_other": 0.0, "idle": 0.0, "cpus": 2, "threads": 1,
    ...        "pgbench_per_thread": 0.2, "seconds": 3}
    >>> limits(Run("r", "nb", "ci", "now", extra={"cpu": cpu}))
    ['other processes on this machine used 1.5 of its 2 cores in r (pgbench 0.2, the server 0.3)']
    """
    return group_limits([run])


def wait_shares(run: Run) -> dict[str, float]:
    """The share of the run's clients in each wait class over its steady phase (``CPU``, ``Lock``, ``Client`` ...)."""
    samples = [row for row in run.probes.get("waits") or [] if run.phase_of(row["t"]) == "steady"]
    instants = {row["t"] for row in samples}
    if not instants:
        return {}
    totals: dict[str, float] = {}
    for row in samples:
        kind = row["wait"].split(":", 1)[0].strip()
        totals[kind] = totals.get(kind, 0.0) + row["backends"]
    clients = sum(totals.values()) / len(instants)
    return {kind: total / len(instants) / clients for kind, total in totals.items()} if clients else {}
