"""An experiment's design without a server: the order of its runs, its rounds, when it stops, what it says."""

import itertools

import pytest

from labkit import experiment
from labkit.errors import UsageError
from labkit.live import RunsProgress
from labkit.pgbench import Progress
from labkit.profiles import Profile
from labkit.records import Run

STEADY = {"connected_s": 0.0, "steady_from_s": 1.0, "steady_to_s": 4.0, "end_s": 4.0}


class FakeLab:
    """What an experiment asks of a lab: its profile, and a run of a spec that returns a record."""

    conninfo = "host=/nonexistent-labkit-test dbname=none connect_timeout=1"  # events cannot be counted here

    def __init__(self, tps_of):
        self.profile = Profile.named("laptop")
        self.tps_of = tps_of  # (arm, its run number) -> tps
        self.ran: list[tuple[str, dict]] = []
        self.counts = itertools.count(1)

    def run_spec(self, spec, *, live=None, setup=None, tags=None, observer=None, **options):
        if setup is not None:
            setup(self)
        if observer is not None:  # pgbench's progress lines, as the runner sends them
            for second in (1.0, 2.0):
                observer.progress(Progress(t=second, tps=100.0 * second, lat_ms=1.0, stddev_ms=0.1), "progress: ...")
        number = sum(1 for name, _ in self.ran if name == spec.name) + 1
        self.ran.append((spec.name, dict(tags or {})))
        run = Run(spec.name, "nb", "laptop", f"t{next(self.counts)}", tps=self.tps_of(spec.name, number),
                  phases=STEADY)
        for key, value in (tags or {}).items():
            setattr(run, key, value)
        return run


ARMS = [experiment.Arm("a", "select 1;"), experiment.Arm("b", "select 2;")]


def test_arms_run_in_rounds_each_reversed_and_tagged_with_their_place():
    setups = []
    lab = FakeLab(lambda arm, number: 100.0)
    result = experiment.run(lab, [experiment.Arm("a", "select 1;", setup=lambda lab: setups.append("a own")),
                                  experiment.Arm("b", "select 2;")], repeats=3,
                            setup=lambda lab, arm: setups.append(arm))
    assert result.ran == ["a", "b", "b", "a", "a", "b"]
    assert setups == ["a own", "a", "b", "b", "a own", "a", "a own", "a", "b"]
    assert [tags["order"] for _, tags in lab.ran] == [1, 2, 3, 4, 5, 6]
    assert len({tags["experiment"] for _, tags in lab.ran}) == 1
    assert [tags["repeat"] for name, tags in lab.ran if name == "a"] == [1, 2, 3]
    assert result.verdict().basis == "pairs" and result.stopped == "as planned"


def test_a_progress_line_says_which_run_goes_on_its_seconds_and_how_the_runs_ended():
    lines = []
    experiment.run(FakeLab(lambda arm, number: 100.0), ARMS, repeats=2, defaults={"duration": 2},
                   progress=RunsProgress(show=lines.append))
    assert lines[:3] == ["run 1 of 4: a (1 of 2), starting", "run 1 of 4: a (1 of 2), 1 of 2 s, 100 tps",
                         "run 1 of 4: a (1 of 2), 2 of 2 s, 200 tps"]
    assert "run 4 of 4: a (2 of 2), starting" in lines and "run 3 of 4: b (2 of 2), 2 of 2 s, 200 tps" in lines
    assert lines[-1].startswith("4 runs in ") and lines[-1].endswith(" s.")


def test_a_steady_drift_falls_on_both_arms_and_the_effect_stands():
    slowing = itertools.count()

    def tps(arm, number):  # the machine slows a little with every run; b is 20% faster
        return (1000.0 - 10 * next(slowing)) * (1.2 if arm == "b" else 1.0)

    result = experiment.run(FakeLab(tps), ARMS, repeats=3)
    found = result.verdict()
    assert found.stands and 1.1 < found.ratio < 1.3
    table = result.table()
    assert list(table.index) == ["a", "b"] and table.loc["b", "verdict"] == "stands"
    assert table.loc["a", "ratio"] == "1 (baseline)"


def test_two_arms_neither_of_them_the_first_are_judged_against_each_other():
    lift = {"a": 1.0, "b": 1.0, "c": 1.3}  # b is the first arm again, c is 30% faster than both
    noise = itertools.cycle([1.0, 1.02, 0.99, 1.01, 0.98, 1.03])
    result = experiment.run(FakeLab(lambda arm, number: 100.0 * lift[arm] * next(noise)),
                            ARMS + [experiment.Arm("c", "select 3;")], repeats=3)
    found = result.verdict("c", against="b")
    assert found.stands and 1.2 < found.ratio < 1.4
    assert (found.a, found.b) == ("b", "c")
    assert not result.verdict("b").stands  # b against a: the same script's speed
    with pytest.raises(UsageError, match="not compared with itself"):
        result.verdict("c", against="c")
    with pytest.raises(UsageError, match="No arm named 'd'"):
        result.verdict("c", against="d")


def test_with_a_budget_it_adds_rounds_until_decided_and_says_so():
    noise = itertools.cycle([1.0, 1.08, 0.95, 1.03, 0.97, 1.05])
    result = experiment.run(FakeLab(lambda arm, number: 100.0 * next(noise) * (1.5 if arm == "b" else 1.0)), ARMS,
                            repeats=2, budget_s=3600)
    assert result.stopped == "decided" and result.verdict().stands
    assert len(result.groups["a"]) > 2  # two pairs of this noise do not decide at the stricter per-look interval
    assert "Decided after" in result.sentence()
    assert result.alpha == experiment.look_alpha(experiment.MAX_REPEATS - 1)


def test_an_aa_experiment_that_cannot_decide_says_so_within_its_budget():
    noise = itertools.cycle([1.0, 1.08, 0.95, 1.03, 0.97, 1.05, 0.99])
    result = experiment.run(FakeLab(lambda arm, number: 100.0 * next(noise)), ARMS, repeats=2, budget_s=0)
    assert result.stopped == "budget" and len(result.groups["a"]) == 2
    assert result.sentence().endswith("Cannot tell within 0 s on this machine.")
    again = experiment.run(FakeLab(lambda arm, number: 100.0 * next(noise)), ARMS, repeats=2, budget_s=3600,
                           max_repeats=4)
    assert again.stopped == "most repeats" and len(again.groups["b"]) == 4


def test_the_per_look_interval_keeps_five_percent_over_all_looks():
    assert experiment.look_alpha(1) == 0.05
    assert [experiment.look_alpha(k) for k in (2, 5, 9)] == [0.028, 0.0143, 0.0100]
    assert experiment.look_alpha(20) == experiment.look_alpha(9)


def test_bad_designs_are_refused_in_one_line():
    lab = FakeLab(lambda arm, number: 1.0)
    with pytest.raises(UsageError, match="compares two arms or more"):
        experiment.run(lab, ARMS[:1])
    with pytest.raises(UsageError, match="Two arms share a name"):
        experiment.run(lab, [ARMS[0], ARMS[0]])
    with pytest.raises(UsageError, match="budget_s adds rounds until a rate's verdict decides"):
        experiment.run(lab, ARMS, metric="table_bytes", budget_s=60)
    with pytest.raises(UsageError, match="order='sideways'"):
        experiment.plan(["a", "b"], 2, order="sideways")


def test_a_cost_experiment_lists_each_arms_events():
    lab = FakeLab(lambda arm, number: 1.0)
    result = experiment.run(lab, ARMS, metric="pages", repeats=2)
    for number, run in enumerate(result.groups["a"], start=1):
        run.extra.update(pages=10.0 + number, events={"autovacuum": number - 1})
    for run in result.groups["b"]:
        run.extra.update(pages=50.0)
    assert result.kind == "cost" and result.verdict().stands
    assert result.table().loc["a", "events"] == "2: an autovacuum visit"
    assert "a 2: an autovacuum visit" in result.details() and "a 2: an autovacuum visit" in result.verdict().sentence
    # under the table, which lists them, the conclusion is said without them
    assert "autovacuum" not in result.sentence() and result.sentence().endswith("apart in every repeat.")


def test_a_rate_experiments_other_figure_is_tabled_as_a_cost_with_each_repeats_events():
    lab = FakeLab(lambda arm, number: 1000.0 if arm == "a" else 1500.0)
    result = experiment.run(lab, ARMS, repeats=2)
    for number, run in enumerate(result.groups["a"], start=1):
        run.extra.update(wal_bytes_per_update=230.0 + number, events={"autovacuum": number - 1})
    for run in result.groups["b"]:
        run.extra.update(wal_bytes_per_update=90.0)
    assert result.kind == "rate" and "held back by" in result.table().columns
    table = result.table("wal_bytes_per_update")
    assert list(table.columns) == ["runs", "wal_bytes_per_update", "range", "ratio", "verdict", "events"]
    assert table.loc["b", "verdict"] == "apart" and table.loc["b", "ratio"].startswith("0.39×")
    assert table.loc["a", "events"] == "2: an autovacuum visit" and table.loc["a", "range"] == "231–232"
