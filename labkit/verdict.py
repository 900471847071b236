"""How sure a comparison is: two groups of runs, one metric, a ratio with its interval and a verdict (pure logic).

A run on a laptop, on Binder's one CPU or on a class server is noisy: the same script run
twice can differ by tens of percent, and the machine's load changes while the runs go on.
:func:`compare` sets two groups of runs side by side on one metric and says what they can
carry, by the kind of the metric:

- **a rate** (``tps``, ``goodput``, a latency): judged run to run, on the logarithm of the
  figure (a ratio). Runs of an experiment whose arms were **interleaved** (A B B A ...,
  :mod:`labkit.experiment`) are taken in pairs, the i-th run of each arm: both ran within a
  few seconds of each other, so a change of load on the machine cancels out of their ratio.
  The verdict is the pairs' mean ratio with its 95% interval (Student's t, ``n - 1`` degrees of
  freedom): it *stands* when the interval excludes 1. Under pure noise that calls 5% of
  comparisons beyond the noise whatever the number of pairs; fewer pairs give a wider interval,
  not a surer one. Groups that were not interleaved (two cells run one after the other) get
  Welch's interval, and the sentence says that a change of load between them could pass for an
  effect. One run on a side has only its own second-to-second spread (10th to 90th percentile of
  its steady per-second tps), and the sentence says that repeats would tell more.
- **a cost** (a size, bytes or WAL or buffers per update, CPU time per call): counted, not timed.
  Its repeats differ by events (an autovacuum visit, a checkpoint), not by noise around a
  mean, so it is read per repeat: it *stands* when every repeat of one arm lies beyond every
  repeat of the other by more than :data:`COST_GAP`, and the events of each repeat are named
  beside it. A cost's verdict never says what held the runs back: that is a rate's question.

Every figure says what it rests on (:data:`MIN_STEADY_S` steady seconds for a rate, wait and
CPU samples for what held the runs back); a verdict that rests on less says "too short to
tell", never "beyond the noise".

:func:`limits` reads what held the runs back from their own records (the CPU split, the wait
events of their clients), once per name with its range across the repeats; :func:`load_change`
says when other processes' CPU differed between the arms.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from .cpu import OTHERS_SHARE
from .cpu import enough as cpu_enough
from .cpu import findings as cpu_findings
from .cpu import others as cpu_others
from .cpu import sentence as cpu_sentence
from .phases import Phases, in_part
from .records import Run
from .stats import mean_interval, welch_interval

WAIT_SHARE = 0.25  # a wait class matters from this share of the run's clients
MIN_WAIT_SAMPLES = 8  # instants of the wait-event probe in the steady phase before its shares are read (2 s)
MIN_STEADY_S = 2.0  # a rate needs this many steady seconds in each run: one second has no spread of its own
ALPHA = 0.05  # a 95% interval
COST_GAP = 0.10  # a cost stands when every repeat of one arm is beyond every repeat of the other by this share
RATES = ("tps", "goodput")
KINDS = ("rate", "cost")


def kind_of(metric: str) -> str:
    """``rate`` for tps, goodput and latencies; ``cost`` for any other figure (sizes, per-unit costs).

    >>> kind_of("tps"), kind_of("lat_p99_ms"), kind_of("table_bytes"), kind_of("wal_bytes_per_update")
    ('rate', 'rate', 'cost', 'cost')
    """
    return "rate" if metric in RATES or (metric.startswith("lat_") and metric.endswith("_ms")) else "cost"


@dataclass(frozen=True)
class Verdict:
    """Group ``b`` against group ``a`` on one metric: a ratio, its interval, and whether it stands beyond the noise."""

    metric: str
    a: str
    b: str
    a_values: list[float]
    b_values: list[float]
    ratio: float | None  # mean of b / mean of a (a rate's pairs: the geometric mean of their ratios)
    low: float | None  # the ratio's interval (a cost: b's lowest over a's highest ...)
    high: float | None  # ... to b's highest over a's lowest)
    stands: bool
    basis: str  # pairs, repeats (not interleaved), seconds, per repeat, too short, load changed, unknown, none
    limits: list[str] = field(default_factory=list)
    sentence: str = ""
    kind: str = "rate"
    events: dict = field(default_factory=dict)  # a cost's repeats: "a 2" -> "an autovacuum visit"
    notes: list[str] = field(default_factory=list)  # what else the comparison should say (a change of load)

    @property
    def outcome(self) -> str:
        """One or two words for a table: stands, within noise, too short, load changed, apart, overlapping, no figure."""
        if self.basis in ("too short", "load changed"):
            return self.basis
        if self.ratio is None:
            return "no figure"
        if self.kind == "cost":
            return "apart" if self.stands else "overlapping"
        return "stands" if self.stands else "within noise"

    @property
    def brief(self) -> str:
        """The sentence without its events: for under a table that lists them beside each repeat."""
        return self.sentence.replace(_events_clause(self.events), "", 1) if self.events else self.sentence

    def __str__(self) -> str:
        return self.sentence

    def _repr_html_(self) -> str:
        import html

        return f"<p>{html.escape(self.sentence)}</p>"

    def details(self) -> str:
        """The sentence, what held the runs back, the events and notes: what a table row leaves out."""
        lines = [self.sentence]
        if self.limits:
            lines.append("What held the runs back: " + "; ".join(self.limits) + ".")
        lines += [f"{repeat}: {event}" for repeat, event in self.events.items()]
        return "\n".join(lines + self.notes)


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
    return float(figure) if isinstance(figure, (int, float)) and not isinstance(figure, bool) else None


def steady_seconds(run: Run) -> float | None:
    """The run's steady seconds (None for a record without phases)."""
    parts = Phases.from_dict(run.phases) if run.phases else None
    return parts.steady_s if parts else None


def _seconds_spread(run: Run) -> tuple[float, float] | None:
    """The 10th and 90th percentile of a run's steady per-second tps (None: too few seconds)."""
    parts = Phases.from_dict(run.phases) if run.phases else None
    points = [p for _, _, p in in_part(run.per_second, parts)] if parts else run.per_second
    values = sorted(p["tps"] for p in points)
    if len(values) < 2:
        return None
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return deciles[0], deciles[-1]


def pairs(a_runs: list[Run], b_runs: list[Run]) -> list[tuple[Run, Run]] | None:
    """The interleaved pairs of two arms of one experiment: the i-th run of each (None: not interleaved).

    Runs are of one experiment when they carry its id (``experiment``) and their place in its order
    (``order``); the i-th run of each arm ran in the same round of the plan.
    """
    ids = {run.experiment for run in [*a_runs, *b_runs]}
    if len(ids) != 1 or None in ids or any(run.order is None for run in [*a_runs, *b_runs]):
        return None
    a_sorted = sorted(a_runs, key=lambda run: run.order or 0)
    b_sorted = sorted(b_runs, key=lambda run: run.order or 0)
    return list(zip(a_sorted, b_sorted))


def steady_pairs(paired: list[tuple[Run, Run]]) -> tuple[list[tuple[Run, Run]], list[tuple[Run, Run]]]:
    """The pairs whose two runs saw the same machine, and those within which its load changed.

    What other processes get of the CPU depends on what the arm leaves them: an arm whose backends
    sleep on a lock leaves cores that a busy neighbour takes (lab 06's shared-lock arm, 32 clients,
    left 0.85 of 2 cores to a package install; its own-key arm, in the same minute, 0.23). So a
    pair is not judged by how far apart its two runs were but by how far that gap departs from the
    experiment's usual gap (the median over its pairs; with two pairs, the other's): a quarter of the
    machine or more, and something started or ended within the pair, which is left out. A load that
    changes between pairs moves both runs of a pair alike, and the pairing cancels it. Leaving a
    pair out is decided by the CPU samples, not by the figure compared, so what is left is judged as
    fairly as the whole; a pair whose CPU was not measured is kept.

    >>> def run(others): return Run("r", "nb", "ci", "now", extra={"cpu": {"pgbench": 0.1, "backends": 0.5,
    ...     "server_other": 0.0, "idle": 1.4 - others, "cpus": 2, "samples": 12, "every_s": 0.25}})
    >>> kept, changed = steady_pairs([(run(0), run(0.8)), (run(0.1), run(0.9)), (run(0), run(0.8))])
    >>> len(kept), len(changed)  # b leaves others more than a does, in every pair alike
    (3, 0)
    >>> kept, changed = steady_pairs([(run(0), run(0.8)), (run(0.1), run(0.9)), (run(0), run(1.4))])
    >>> len(kept), len(changed)  # something else started within the third pair
    (2, 1)
    """
    gaps: list[tuple[float, float] | None] = []
    for a, b in paired:
        seen = _others(a), _others(b)
        gaps.append(None if None in seen else (seen[1][0] - seen[0][0], seen[0][1]))  # type: ignore[index]
    known = [gap for gap, _ in filter(None, gaps)]
    kept: list[tuple[Run, Run]] = []
    changed: list[tuple[Run, Run]] = []
    for pair, item in zip(paired, gaps):
        if item is None or len(known) < 2:
            moved = False
        elif len(known) == 2:
            moved = abs(known[0] - known[1]) >= OTHERS_SHARE * item[1]
        else:
            moved = abs(item[0] - statistics.median(known)) >= OTHERS_SHARE * item[1]
        (changed if moved else kept).append(pair)
    return kept, changed


def _others(run: Run) -> tuple[float, float] | None:
    """(cores other processes used during ``run``, the machine's cores), where its samples can tell."""
    cpu = run.extra.get("cpu") or {}
    used = cpu_others(cpu) if cpu_enough(cpu) else None
    return None if used is None or not cpu.get("cpus") else (used, cpu["cpus"])


def compare(a_runs: list[Run] | Run, b_runs: list[Run] | Run, *, metric: str = "tps", kind: str | None = None,
            alpha: float = ALPHA) -> Verdict:
    """``b`` against ``a`` on ``metric``: the ratio, its interval (or a cost's repeats), and whether it stands.

    ``kind`` is ``rate`` or ``cost`` (default: :func:`kind_of` the metric). ``alpha``: the
    interval's error rate (an experiment that adds repeats until it decides passes a smaller one).
    Interrupted runs are left out (their figures are of part of a run), and said so.

    >>> def runs(name, *tps): return [Run(name, "nb", "ci", "now", tps=t) for t in tps]
    >>> print(compare(runs("plain", 100, 110, 105), runs("skip", 300, 330, 320)))
    skip / plain, tps: 3.02× (2.70–3.36×, from 3 and 3 runs, not interleaved): beyond the run-to-run noise.
    >>> print(compare(runs("plain", 100, 130), runs("skip", 120, 125)))
    skip / plain, tps: 1.07× (0.24–4.88×, from 2 and 2 runs, not interleaved): within noise: cannot tell from these runs.
    """
    kind = kind or kind_of(metric)
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(KINDS)}")
    a_all = [a_runs] if isinstance(a_runs, Run) else list(a_runs)
    b_all = [b_runs] if isinstance(b_runs, Run) else list(b_runs)
    a_name = a_all[0].name if a_all else "a"
    b_name = b_all[0].name if b_all else "b"
    cut = [run for run in a_all + b_all if run.interrupted]
    a_list = [run for run in a_all if not run.interrupted and value(run, metric) is not None]
    b_list = [run for run in b_all if not run.interrupted and value(run, metric) is not None]
    head = f"{b_name} / {a_name}, {metric}: "
    tail = f" ({len(cut)} interrupted run{'s' * (len(cut) != 1)} left out.)" if cut else ""
    held = (group_limits(a_list) + group_limits(b_list)) if kind == "rate" else []
    notes = [note for note in [load_change(a_list, b_list)] if note] if kind == "rate" else []
    a_values = [value(run, metric) or 0.0 for run in a_list]
    b_values = [value(run, metric) or 0.0 for run in b_list]

    def verdict(ratio, low, high, stands, basis, sentence, events=None) -> Verdict:
        return Verdict(metric, a_name, b_name, a_values, b_values, None if ratio is None else round(ratio, 4),
                       None if low is None else round(low, 4), None if high is None else round(high, 4), stands,
                       basis, held, sentence + tail, kind, events or {}, notes)

    if not a_values or not b_values:
        missing = a_name if not a_values else b_name
        return verdict(None, None, None, False, "none", f"{head}no comparison, {missing} has no {metric} figure.")
    a_mean, b_mean = statistics.fmean(a_values), statistics.fmean(b_values)
    if not a_mean:
        return verdict(None, None, None, False, "none",
                       f"{head}no ratio: {a_name}'s {metric} is 0 (it completed no work to compare with).")
    if kind == "cost":
        return _cost(head, a_list, b_list, a_values, b_values, verdict)
    shortest = min((s for s in (steady_seconds(run) for run in a_list + b_list) if s is not None), default=None)
    if shortest is not None and shortest < MIN_STEADY_S:
        seconds = f"{shortest:.1f}".rstrip("0").rstrip(".")
        return verdict(b_mean / a_mean, None, None, False, "too short",
                       f"{head}{b_mean / a_mean:.2f}×, but the shortest run had {seconds} steady second"
                       f"{'s' * (seconds != '1')}: too short to tell (a rate needs {MIN_STEADY_S:g} in each run).")
    paired = pairs(a_list, b_list)
    if len(a_values) >= 2 and len(b_values) >= 2:
        kept, changed = steady_pairs(paired) if paired is not None else ([], [])
        if paired is not None and len(kept) >= 2:
            ratios = [(value(a, metric) or 0.0, value(b, metric) or 0.0) for a, b in kept]
            found = (_log_interval([math.log(y) - math.log(x) for x, y in ratios], None, alpha)
                     if all(x > 0 and y > 0 for x, y in ratios) else None)
            counted = f"from {len(kept)} interleaved pairs" + (
                f"; {len(changed)} more left out: the machine's load changed within them" if changed else "")
            basis = "pairs"
        elif paired is not None and len(paired) >= 2:
            return verdict(b_mean / a_mean, None, None, False, "load changed",
                           f"{head}{b_mean / a_mean:.2f}× (the machine's load changed within {len(changed)} of the "
                           f"{len(paired)} interleaved pairs, which leaves fewer than two to compare): cannot tell; "
                           "run it again on a quieter machine, or with more repeats.")
        else:
            found = _log_interval([math.log(v) for v in a_values if v > 0], [math.log(v) for v in b_values if v > 0],
                                  alpha)
            counted = f"from {len(a_values)} and {len(b_values)} runs, not interleaved"
            basis = "repeats"
        if found is None:  # a zero on one side: no ratio per run, the ratio of the means only
            return verdict(b_mean / a_mean, None, None, False, "unknown",
                           f"{head}{b_mean / a_mean:.2f}× (a run with 0 {metric}: no interval): cannot tell.")
        ratio, low, high = found
        stands = low > 1.0 or high < 1.0
        judged = "beyond the run-to-run noise" if stands else "within noise: cannot tell from these runs"
        level = "" if alpha == ALPHA else f", a {1 - alpha:.1%} interval"
        return verdict(ratio, low, high, stands, basis,
                       f"{head}{ratio:.2f}× ({low:.2f}–{high:.2f}×, {counted}{level}): {judged}.")
    spreads = [_seconds_spread(runs[0]) if metric == "tps" and len(runs) == 1 else None for runs in (a_list, b_list)]
    ranges: list[tuple[float, float] | None] = []
    for values, spread in zip((a_values, b_values), spreads):
        if len(values) >= 2:
            ranges.append((min(values), max(values)))
        elif spread is not None:  # the run's own figure stays inside its second-to-second range
            ranges.append((min(spread[0], values[0]), max(spread[1], values[0])))
        else:
            ranges.append(None)
    ratio = b_mean / a_mean
    a_range, b_range = ranges
    if a_range is None or b_range is None:
        return verdict(ratio, None, None, False, "unknown",
                       f"{head}{ratio:.2f}× (one run of at least one side, with no per-second figures): its spread is "
                       "unknown, so this says nothing sure: repeat the runs.")
    (a_low, a_high), (b_low, b_high) = a_range, b_range
    apart = b_low > a_high or a_low > b_high
    stands = apart and abs(b_mean - a_mean) > max(a_high - a_low, b_high - b_low)
    judged = ("beyond the second-to-second spread, but one run says nothing of run-to-run noise: repeat to be sure"
              if stands else "within the second-to-second spread: repeat the runs to tell")
    low, high = (b_low / a_high if a_high else None), (b_high / a_low if a_low else None)
    shown = f"{low:.2f}–{high:.2f}× " if low is not None and high is not None else ""
    return verdict(ratio, low, high, stands, "seconds",
                   f"{head}{ratio:.2f}× ({shown}one run of at least one side: its spread is second to second): "
                   f"{judged}.")


def _log_interval(a_or_differences: list[float], b: list[float] | None, alpha: float):
    """The ratio and its interval from log values: paired differences (``b`` None), or Welch on two groups."""
    found = mean_interval(a_or_differences, alpha) if b is None else welch_interval(a_or_differences, b, alpha)
    if found is None:
        return None
    return tuple(math.exp(x) for x in found)


def _cost(head: str, a_list: list[Run], b_list: list[Run], a_values: list[float], b_values: list[float], verdict):
    """A cost read per repeat: apart when every repeat of one arm is beyond every repeat of the other by COST_GAP."""
    events = {}
    for name, runs in ((a_list[0].name, a_list), (b_list[0].name, b_list)):
        for number, run in enumerate(runs, start=1):
            said = event_sentence(run)
            if said:
                events[f"{name} {number}" if len(runs) > 1 else name] = said
    ratio = statistics.fmean(b_values) / statistics.fmean(a_values)
    a_low, a_high, b_low, b_high = min(a_values), max(a_values), min(b_values), max(b_values)
    low = b_low / a_high if a_high else None
    high = b_high / a_low if a_low else None
    above = a_high and b_low > a_high * (1 + COST_GAP)
    below = b_high < a_low * (1 - COST_GAP)
    stands = bool(above or below)
    b_name, a_name = b_list[0].name, a_list[0].name
    if len(a_values) == 1 and len(b_values) == 1:
        counted = "one repeat each"
    elif stands:
        bound = low if above else high
        counted = (f"every {b_name} repeat {'at least' if above else 'at most'} {bound:.2f}× every {a_name} repeat"
                   if bound is not None else "every repeat apart")
    else:
        counted = f"{len(a_values)} and {len(b_values)} repeats"
    shown = f"{low:.2f}–{high:.2f}×, " if low is not None and high is not None else ""
    judged = ("apart in every repeat" if stands else
              f"the repeats overlap or lie within {COST_GAP:.0%} of each other: cannot tell from them")
    if events:
        judged += _events_clause(events)
    return verdict(ratio, low, high, stands, "per repeat", f"{head}{ratio:.2f}× ({shown}{counted}): {judged}.", events)


def _events_clause(events: dict) -> str:
    return "; events: " + "; ".join(f"{repeat}: {event}" for repeat, event in events.items())


def event_sentence(run: Run) -> str:
    """What happened during a run that changes a cost: autovacuum visits, checkpoints ("" when nothing).

    The experiment notes ``extra.events`` around each run (:mod:`labkit.experiment`).

    >>> event_sentence(Run("r", "nb", "ci", "now", extra={"events": {"autovacuum": 1, "autoanalyze": 0, "checkpoints": 2}}))
    'an autovacuum visit, 2 checkpoints'
    """
    events = run.extra.get("events") or {}
    said = []
    for key, one, many in (("autovacuum", "an autovacuum visit", "{} autovacuum visits"),
                           ("autoanalyze", "an autoanalyze", "{} autoanalyzes"),
                           ("checkpoints", "a checkpoint", "{} checkpoints")):
        count = events.get(key) or 0
        if count:
            said.append(one if count == 1 else many.format(count))
    return ", ".join(said)


WAITS = (("Client", "the client: its backends waited for pgbench's next statement"),
         ("Lock", "heavyweight lock waits"), ("LWLock", "LWLock waits"), ("IO", "I/O waits"))


def group_limits(runs: list[Run]) -> list[str]:
    """What held the runs of one name back, once per kind, with its range across them.

    Each kind is read only from runs that sampled enough of it (the CPU split, the wait events of
    their steady phase); a backend idle inside a transaction waits for pgbench's next statement
    too, and is counted with the client.

    >>> cpu = {"pgbench": 0.2, "backends": 0.3, "server_other": 0.0, "idle": 0.0, "cpus": 2, "threads": 1,
    ...        "pgbench_per_thread": 0.2, "samples": 12, "every_s": 0.25}
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
    ...        "pgbench_per_thread": 0.2, "samples": 12, "every_s": 0.25}
    >>> limits(Run("r", "nb", "ci", "now", extra={"cpu": cpu}))
    ['other processes on this machine used 1.5 of its 2 cores in r (pgbench 0.2, the server 0.3)']
    """
    return group_limits([run])


def wait_shares(run: Run) -> dict[str, float]:
    """The share of the run's clients in each wait class over its steady phase (``CPU``, ``Lock``, ``Client`` ...).

    A backend ``idle in transaction`` waits for pgbench's next statement inside a transaction: it
    is counted as ``Client``. Empty when the steady phase has fewer than :data:`MIN_WAIT_SAMPLES`
    instants (a share of a few samples says little).
    """
    samples = [row for row in run.probes.get("waits") or [] if run.phase_of(row["t"]) == "steady"]
    instants = {row["t"] for row in samples}
    if len(instants) < MIN_WAIT_SAMPLES:
        return {}
    totals: dict[str, float] = {}
    for row in samples:
        kind = "Client" if row["wait"] == "idle in transaction" else row["wait"].split(":", 1)[0].strip()
        totals[kind] = totals.get(kind, 0.0) + row["backends"]
    clients = sum(totals.values()) / len(instants)
    return {kind: total / len(instants) / clients for kind, total in totals.items()} if clients else {}


def load_change(a_runs: list[Run], b_runs: list[Run]) -> str | None:
    """A sentence when other processes' CPU differed between two arms by a quarter of the machine or more.

    Interleaved, both arms saw the same machine: the difference is what each arm left other
    processes (see :func:`steady_pairs`). Run back to back, the machine may have changed between them.

    >>> def run(name, others): return Run(name, "nb", "ci", "now", extra={"cpu": {"pgbench": 0.1, "backends": 0.5,
    ...     "server_other": 0.0, "idle": 1.4 - others, "cpus": 2, "samples": 12, "every_s": 0.25}})
    >>> load_change([run("a", 0.0), run("a", 0.1)], [run("b", 1.2), run("b", 1.0)])
    'Other processes used 0.1 of the 2 cores during a runs, 1.1 during b runs: run back to back, the machine may have changed between the arms.'
    """
    means, cpus = [], 0.0
    for runs in (a_runs, b_runs):
        seen = [found for found in map(_others, runs) if found is not None]
        if not seen:
            return None
        means.append(statistics.fmean(used for used, _ in seen))
        cpus = seen[0][1]
    if abs(means[1] - means[0]) < OTHERS_SHARE * cpus:
        return None
    why = ("the runs were interleaved, so that is what each arm left them" if pairs(a_runs, b_runs) is not None
           else "run back to back, the machine may have changed between the arms")
    return (f"Other processes used {means[0]:.1f} of the {cpus:g} cores during {a_runs[0].name} runs, "
            f"{means[1]:.1f} during {b_runs[0].name} runs: {why}.")
