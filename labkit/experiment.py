"""A comparison as an experiment: its arms interleaved, each arm's setup around each run, a verdict that fits.

Two arms run one after the other (all of A, then all of B) compare the arms *and* whatever
changed on the machine in between: another program starting, a checkpoint the first arm's
rebuilds left behind, autovacuum waking. The runs of each arm then agree with each other and
the difference looks sure. An :class:`Experiment` runs its arms in rounds, each round every arm
once, the order reversed every other round (A B, B A, A B ...), so that a change of load falls
on both arms alike; each arm's setup (a rebuild, a ``CHECKPOINT``, a vacuum) runs before each of
its runs, and what happened during each run that changes a cost (autovacuum visits, checkpoints
and the buffers they wrote) is noted in its record as ``extra.events``.

    exp = lab.experiment({"btree": script, "hash": script}, setup=lambda lab, arm: rebuild(arm),
                         clients=32, duration=10, repeats=3)
    exp                       # one compact table and one sentence
    exp.verdict("hash")       # labkit.verdict.Verdict of hash against the first arm
    exp.details()             # every run, its events, what held it back

With ``budget_s``, the experiment adds rounds until its verdict decides or the budget is spent,
and says which ("cannot tell within 2 min on this machine"). Looking again after each round
would call noise an effect more often than 5% of the time; each look uses a stricter interval
(:data:`LOOK_ALPHA`, calibrated so that all the looks together keep 5% under pure noise:
``tests/benchmarks/bench_experiment.py`` measures it, on real runs too).

:func:`plan` (the order) and :func:`events` (what changed during a run) are pure; :func:`run`
waits for the runs, through ``Lab.run_spec``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import db, records
from .errors import UsageError
from .pgbench import Spec
from .queries import query
from .verdict import ALPHA, Verdict, compare, event_sentence, group_limits, kind_of, load_change
from .verdict import value as value_of

log = logging.getLogger(__name__)

# The per-look error rate that keeps 5% overall under pure noise, by the number of looks (the
# rounds from the first decision to the last allowed): a Pocock-like constant, from 200,000
# simulated experiments of normal paired differences (bench_experiment.py --calibrate).
LOOK_ALPHA = {1: 0.05, 2: 0.028, 3: 0.020, 4: 0.0166, 5: 0.0143, 6: 0.0127, 7: 0.0116, 8: 0.0108, 9: 0.0100}
MAX_REPEATS = 10  # the most runs of each arm an experiment with a budget adds up to
ORDERS = ("alternate", "random")


def plan(names: list[str], rounds: int, *, order: str = "alternate", seed: int | None = None,
         first_round: int = 0) -> list[str]:
    """The order of the runs: ``rounds`` rounds, each arm once per round.

    ``alternate`` reverses every other round (A B, B A: a steady drift of the machine falls on both
    arms alike); ``random`` shuffles each round (seeded), as google/benchmark's random interleaving.

    >>> plan(["a", "b"], 3)
    ['a', 'b', 'b', 'a', 'a', 'b']
    >>> plan(["a", "b", "c"], 2)
    ['a', 'b', 'c', 'c', 'b', 'a']
    >>> sorted(plan(["a", "b"], 2, order="random", seed=1)) == ["a", "a", "b", "b"]
    True
    """
    if order not in ORDERS:
        raise UsageError(f"order={order!r}: use one of {', '.join(ORDERS)}.")
    shuffle = random.Random(seed)
    found: list[str] = []
    for number in range(first_round, first_round + rounds):
        this = list(names)
        if order == "random":
            shuffle.shuffle(this)
        elif number % 2:
            this.reverse()
        found += this
    return found


def events(before: dict, after: dict) -> dict:
    """What changed between two counts of :data:`run_events` (``labkit/sql/run_events.sql``).

    >>> events({"autovacuum": 3, "autoanalyze": 1, "vacuuming": 0, "checkpoints_done": 5, "checkpoints_requested": 2,
    ...         "checkpoint_buffers": 100}, {"autovacuum": 4, "autoanalyze": 1, "vacuuming": 1, "checkpoints_done": 5,
    ...         "checkpoints_requested": 3, "checkpoint_buffers": 900})
    {'autovacuum': 2, 'autoanalyze': 0, 'checkpoints': 1, 'checkpoint_buffers': 800}

    A checkpoint still going at the end is counted though the checkpointer has not reported it yet:

    >>> events({"checkpoints_done": 5, "checkpoints_requested": 2}, {"checkpoints_done": 5, "checkpoints_requested": 2,
    ...         "checkpointing": 1})["checkpoints"]
    1
    """
    def grew(key: str) -> int:
        return max(0, int(after.get(key) or 0) - int(before.get(key) or 0))

    return {
        # a visit that ended during the run, or one still going at its end
        "autovacuum": grew("autovacuum") + int(after.get("vacuuming") or 0),
        "autoanalyze": grew("autoanalyze"),
        # a checkpoint that ended during the run, or one still going at its end (its counts are
        # reported when it ends): at least one
        "checkpoints": max(grew("checkpoints_done"), grew("checkpoints_requested"),
                           min(1, int(after.get("checkpointing") or 0))),
        "checkpoint_buffers": grew("checkpoint_buffers"),
    }


def count_events(conninfo: str) -> dict:
    """The counts :func:`events` compares, read now ({} where the server cannot say: an older release)."""
    import psycopg

    try:
        with db.connect(conninfo, db.MONITOR) as connection:
            cursor = connection.execute(query("run_events"))
            names = [column.name for column in cursor.description or []]
            row = cursor.fetchone()
    except psycopg.Error as error:
        log.info("could not count autovacuum visits and checkpoints: %s", db.message(error))
        return {}
    return dict(zip(names, row or ()))


@dataclass(frozen=True)
class Arm:
    """One arm: a name and a pgbench script (or a whole ``%%pgbench`` cell's spec), with its own setup."""

    name: str
    script: str = ""
    spec: Spec | None = None  # a deferred %%pgbench cell's; else built from the script
    setup: Callable | str | None = None  # before each of its runs: SQL, or a function of the lab
    options: dict = field(default_factory=dict)  # a deferred cell's probes, work, hold_sessions


@dataclass
class Result:
    """An experiment's runs, each arm's repeats, its verdicts against the first arm, and how it ended."""

    arms: list[str]
    metric: str
    kind: str
    groups: dict[str, records.Repeats]
    ran: list[str]  # the arms in the order they ran
    stopped: str  # "as planned", "decided", "budget", "most repeats", "interrupted"
    elapsed_s: float
    budget_s: float | None = None
    alpha: float = ALPHA

    @property
    def baseline(self) -> str:
        return self.arms[0]

    def verdict(self, arm: str | None = None, *, against: str | None = None, metric: str | None = None,
                kind: str | None = None) -> Verdict:
        """``arm`` (default: the second) against the first arm, or ``against`` another, on the experiment's metric or another.

        The arms ran interleaved, so any two of them pair by repeat as an arm and the first do.
        """
        arm, against = arm or self.arms[1], against or self.baseline
        for name in (arm, against):
            if name not in self.groups:
                raise UsageError(f"No arm named {name!r} in this experiment (its arms: {', '.join(self.arms)}).")
        if arm == against:
            raise UsageError(f"An arm is not compared with itself: give `against` another arm than {arm!r}.")
        metric = metric or self.metric
        alpha = self.alpha if metric == self.metric else ALPHA
        return compare(self.groups[against], self.groups[arm], metric=metric,
                       kind=kind or (self.kind if metric == self.metric else None), alpha=alpha)

    def verdicts(self) -> list[Verdict]:
        return [self.verdict(arm) for arm in self.arms[1:]]

    def sentence(self) -> str:
        """One sentence: each arm against the first, and how the experiment ended when that matters.

        A cost's events are left to the table, which names them beside each repeat, and to details().
        """
        said = " ".join(v.sentence if self.kind == "rate" else v.brief for v in self.verdicts())
        if self.stopped == "budget" and not any(v.stands for v in self.verdicts()):
            said += f" Cannot tell within {_duration(self.budget_s or 0)} on this machine."
        elif self.stopped == "decided":
            said += f" Decided after {len(self.groups[self.baseline])} runs of each arm."
        elif self.stopped == "interrupted":
            said += " (Interrupted: the runs before the interrupt.)"
        return said

    def table(self, metric: str | None = None, *, kind: str | None = None):
        """Arm, runs, the metric's mean and range, the ratio to the first arm with its interval, verdict, limits.

        ``metric``: another figure of the same runs (e.g. ``result.table("wal_bytes_per_update")``),
        judged by its own kind (a size or a per-unit cost: per repeat, with each repeat's events).
        """
        import pandas as pd

        metric = metric or self.metric
        kind = kind or (self.kind if metric == self.metric else kind_of(metric))
        rows = []
        for arm in self.arms:
            group = self.groups[arm]
            values = [v for v in (value_of(run, metric) for run in group if not run.interrupted) if v is not None]
            row = {"arm": arm, "runs": len(group),
                   metric: _shown(statistics_mean(values)) if values else None,
                   "range": f"{_shown(min(values))}–{_shown(max(values))}" if len(values) > 1 else ""}
            if arm == self.baseline:
                row.update(ratio="1 (baseline)", verdict="")
            else:
                found = self.verdict(arm, metric=metric, kind=kind)
                interval = (f" ({found.low:.2f}–{found.high:.2f})" if found.low is not None and found.high is not None
                            else "")
                row.update(ratio=f"{found.ratio:.2f}×{interval}" if found.ratio is not None else "—",
                           verdict=found.outcome)
            if kind == "rate":
                row["held back by"] = "; ".join(short_limits(list(group))) or "—"
            else:
                row["events"] = "; ".join(f"{number}: {said}" for number, run in enumerate(group, start=1)
                                          if (said := event_sentence(run))) or "none"
            rows.append(row)
        return pd.DataFrame(rows).set_index("arm")

    def details(self) -> str:
        """Every verdict in full, what held each arm back, the events of each run, a change of load."""
        lines = [f"{len(self.ran)} runs in {_duration(self.elapsed_s)}, in this order: {' '.join(self.ran)} "
                 f"({self.stopped})."]
        for found in self.verdicts():
            lines.append(found.details())
        for arm in self.arms:
            for run in self.groups[arm]:
                said = event_sentence(run)
                if said:
                    lines.append(f"{arm} run {run.repeat}: {said}")
        return "\n".join(lines)

    def runs(self) -> list[records.Run]:
        return [run for arm in self.arms for run in self.groups[arm]]

    def __str__(self) -> str:
        return self.sentence()

    def __repr__(self) -> str:
        return f"{self.table().to_string()}\n{self.sentence()}"

    def _repr_html_(self) -> str:
        import html

        return self.table().to_html() + f"<p>{html.escape(self.sentence())}</p>"


def statistics_mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _shown(number: float) -> str:
    """A figure for the table: thousands separated, two significant decimals below 100.

    >>> _shown(12345.678), _shown(3.14159), _shown(0.000123)
    ('12,346', '3.14', '0.000123')
    """
    if abs(number) >= 100:
        return f"{number:,.0f}"
    return f"{number:.3g}" if abs(number) < 1 else f"{number:.2f}"


def _duration(seconds: float) -> str:
    """``95 s`` or ``2 min``.

    >>> _duration(95), _duration(120), _duration(150)
    ('95 s', '2 min', '2.5 min')
    """
    if seconds < 100:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f}".rstrip("0").rstrip(".") + " min"


def short_limits(runs: list[records.Run]) -> list[str]:
    """What held an arm back, in a few words each, for a table (the full sentences: :func:`labkit.verdict.limits`).

    >>> cpu = {"pgbench": 0.95, "backends": 0.9, "server_other": 0.05, "idle": 0.02, "cpus": 2, "threads": 1,
    ...        "pgbench_per_thread": 0.95, "samples": 12, "every_s": 0.25}
    >>> short_limits([records.Run("r", "nb", "ci", "now", extra={"cpu": cpu})])
    ['pgbench (95% of a core)', 'no idle CPU']
    """
    found = []
    for sentence in group_limits(runs):
        if sentence.startswith("the client: pgbench kept"):
            found.append("pgbench (" + sentence.split("kept ", 1)[1].split(" busy")[0] + ")")
        elif sentence.startswith("other processes"):
            found.append("other processes (" + sentence.split("used ", 1)[1].split(" in ")[0] + ")")
        elif sentence.startswith("the CPU"):
            found.append("no idle CPU")
        else:
            label, _, share = sentence.partition(" (")
            label = {"the client: its backends waited for pgbench's next statement": "waiting for pgbench",
                     "its backends waited for pgbench's next statement, on a machine with no CPU to spare":
                         "waiting for pgbench (no CPU to spare)"}.get(label, label)
            found.append(f"{label} ({share.split(' ')[0]})" if share else label)
    return found


def look_alpha(looks: int) -> float:
    """The interval's error rate for each of ``looks`` looks at one experiment (5% over them all)."""
    if looks <= 1:
        return ALPHA
    return LOOK_ALPHA.get(looks, LOOK_ALPHA[max(LOOK_ALPHA)])


def run(lab, arms: list[Arm], *, metric: str = "tps", kind: str | None = None, repeats: int | None = None,
        budget_s: float | None = None, max_repeats: int = MAX_REPEATS, order: str = "alternate",
        seed: int | None = None, setup: Callable | None = None, after: Callable | None = None,
        defaults: dict | None = None, live: bool | None = False, progress=None) -> Result:
    """Run ``arms`` interleaved, ``repeats`` rounds (with ``budget_s``: until decided or the budget is spent).

    ``setup(lab, arm)`` runs before each run (after the arm's own setup), ``after(lab, run)`` after each.
    ``defaults`` are :meth:`Lab.pgbench`'s keyword arguments for every arm's runs (clients, duration,
    mode, options, probes, work ...). ``progress`` (a :class:`labkit.live.RunsProgress`; by default
    one in a notebook, when the runs show no live chart each) hears which run goes on and its seconds.
    """
    from . import live as live_module

    if len(arms) < 2:
        raise UsageError("An experiment compares two arms or more: give each its name and script.")
    names = [arm.name for arm in arms]
    if len(set(names)) != len(names):
        raise UsageError(f"Two arms share a name in {names}: give each arm its own.")
    kind = kind or kind_of(metric)
    repeats = repeats if repeats is not None else lab.profile.repeats
    if not isinstance(repeats, int) or repeats < 1:
        raise UsageError(f"repeats={repeats!r}: give a whole number of rounds, 1 or more.")
    if budget_s is not None and (kind != "rate" or repeats < 2):
        raise UsageError("budget_s adds rounds until a rate's verdict decides: it needs a rate metric (tps, goodput, "
                         "a latency) and repeats of at least 2.")
    most = max(repeats, min(max_repeats, MAX_REPEATS)) if budget_s is not None else repeats
    alpha = look_alpha(most - repeats + 1) if budget_s is not None else ALPHA
    specs = {arm.name: _spec(lab, arm, defaults or {}) for arm in arms}
    experiment = f"{names[0]}@{records.now_iso()}"
    groups = {name: records.Repeats() for name in names}
    ran: list[str] = []
    started = time.monotonic()
    stopped = "as planned"
    by_name = {arm.name: arm for arm in arms}
    if progress is None and not live and live_module.in_notebook():
        progress = live_module.RunsProgress()

    def decided() -> bool:
        return all(compare(groups[names[0]], groups[name], metric=metric, kind=kind, alpha=alpha).stands
                   for name in names[1:])

    round_number = 0
    while round_number < most:
        if budget_s is not None and round_number >= repeats:
            if decided():
                stopped = "decided"
                break
            elapsed = time.monotonic() - started
            if elapsed + elapsed / round_number > budget_s:  # one more round would not fit
                stopped = "budget"
                break
        for name in plan(names, 1, order=order, seed=None if seed is None else seed + round_number,
                         first_round=round_number):
            ran.append(name)
            if progress is not None:
                progress.begin(len(ran), most * len(names), name, round_number + 1, most, specs[name].duration_s)
            record = _runner(lab, by_name[name], specs[name], setup, experiment, len(ran), round_number + 1, most,
                             live, defaults or {}, progress)()
            groups[name].append(record)
            if after is not None:
                after(lab, record)
        round_number += 1
    else:
        if budget_s is not None:
            stopped = "decided" if decided() else "most repeats"
    if progress is not None:
        progress.finish(len(ran), time.monotonic() - started)
    return Result(names, metric, kind, groups, ran, stopped, time.monotonic() - started, budget_s, alpha)


def _spec(lab, arm: Arm, defaults: dict):
    """The arm's checked pgbench spec, named after the arm."""
    from dataclasses import replace

    from . import pgbench

    if arm.spec is not None:
        return replace(arm.spec, name=arm.name)
    return pgbench.parse_options(defaults.get("options", ""), script=arm.script, name=arm.name,
                                 clients=defaults.get("clients"), duration_s=defaults.get("duration"),
                                 transactions=defaults.get("transactions"), jobs=defaults.get("jobs"),
                                 mode=defaults.get("mode"), defaults=lab.profile.run_defaults())


def _runner(lab, arm: Arm, spec, setup, experiment: str, position: int, repeat: int, repeats: int, live,
            defaults: dict, progress=None):
    """One run of an arm: its setup, the events counted around pgbench, the record tagged with its place."""

    def before(lab) -> None:
        if callable(arm.setup):
            arm.setup(lab)
        elif arm.setup:
            lab.sql(arm.setup)
        if setup is not None:
            setup(lab, arm.name)
        counted["before"] = count_events(lab.conninfo)

    counted: dict = {}
    options = {key: defaults[key] for key in ("probes", "work", "perf", "hold_sessions") if key in defaults}
    options.update(arm.options)

    def go() -> records.Run:
        tags = {"repeat": repeat, "repeats": repeats, "series": f"{arm.name}@{experiment}",
                "experiment": experiment, "order": position}
        try:
            record = lab.run_spec(spec, live=live, setup=before, tags=tags, observer=None if live else progress,
                                  **options)
        except KeyboardInterrupt:
            interrupted = getattr(lab, "last_run", None)
            if interrupted is not None and counted.get("before"):
                interrupted.note(events=events(counted["before"], count_events(lab.conninfo)))
            raise
        if counted.get("before"):
            record.note(events=events(counted["before"], count_events(lab.conninfo)))
        return record

    return go


def per_call(lab, statements: dict[str, str], *, calls: int, rounds: int = 4, min_s: float = 1.0) -> Result:
    """What one call costs in each of ``statements``, measured in one session, rounds alternating (A B, B A ...).

    Throughput across many clients mixes the cost of a call with the machine's load and with how
    the clients share the CPU; the backend's own CPU time per call does not. Each measurement
    runs its statement again and again for at least ``min_s`` seconds in one session, and divides
    its backend's CPU time (from the operating system: user and system time) by the calls made
    (``calls`` per statement). Where the server is not a process labkit started on this machine,
    its CPU cannot be read: the wall time the statements took is used instead, and said. Each
    round is saved as a run record (``extra.ns_per_call``); the verdict reads them per round.
    """
    import psutil

    if len(statements) < 2 or calls < 1 or rounds < 1:
        raise UsageError("per_call compares two statements or more, each making calls >= 1 calls, in rounds >= 1.")
    names = list(statements)
    experiment = f"{names[0]}@{records.now_iso()}"
    groups = {name: records.Repeats() for name in names}
    ran: list[str] = []
    started = time.monotonic()
    with db.connect(lab.conninfo) as connection:
        backend = None
        if lab.server.postmaster_pid() is not None:
            try:
                backend = psutil.Process(connection.info.backend_pid)
                backend.cpu_times()
            except psutil.Error:
                backend = None
        basis = "the backend's CPU time" if backend is not None else "wall time (the server's CPU cannot be read here)"

        def clock() -> float:
            if backend is None:
                return time.perf_counter()
            times = backend.cpu_times()
            return times.user + times.system

        for sql in statements.values():
            connection.execute(sql)  # a first call plans and caches: not part of the measurement
        for round_number in range(rounds):
            for name in plan(names, 1, first_round=round_number):
                ran.append(name)
                executions, begun, wall = 0, clock(), time.perf_counter()
                while executions == 0 or time.perf_counter() - wall < min_s:
                    connection.execute(statements[name])
                    executions += 1
                spent = clock() - begun
                run = records.Run(name, lab.notebook, lab.profile.name, records.now_iso(),
                                  scripts=[{"name": name, "text": statements[name], "weight": 1}], clients=1,
                                  repeat=round_number + 1, repeats=rounds, series=f"{name}@{experiment}",
                                  experiment=experiment, order=len(ran),
                                  extra={"ns_per_call": round(spent / (executions * calls) * 1e9, 1),
                                         "per_call_basis": basis, "executions": executions, "calls": calls})
                run.save()
                groups[name].append(run)
    return Result(names, "ns_per_call", "cost", groups, ran, "as planned", time.monotonic() - started)


__all__ = ["Arm", "Result", "count_events", "events", "load_change", "per_call", "plan", "run"]
