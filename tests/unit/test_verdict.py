"""The verdict: a ratio with its spread, beyond it or within noise, and what held the runs back."""

from labkit import records, verdict
from labkit.records import Run


def runs(name, *tps, **fields):
    return [Run(name, "nb", "ci", "now", tps=t, repeat=i, repeats=len(tps), series=f"{name}@now", **fields)
            for i, t in enumerate(tps, start=1)]


def test_groups_whose_spreads_overlap_are_within_noise():
    found = verdict.compare(runs("plain", 100, 140, 120), runs("spread", 110, 150, 125))
    assert found.stands is False and found.basis == "repeats"
    assert "within noise here: repeat, or lengthen the runs, or use the laptop profile" in found.sentence
    laptop = verdict.compare([Run("plain", "nb", "laptop", "now", tps=t) for t in (100, 140, 120)],
                             [Run("spread", "nb", "laptop", "now", tps=t) for t in (110, 150, 125)])
    assert laptop.sentence.count("within noise here: repeat, or lengthen the runs.") == 1  # laptop runs already
    assert found.ratio == round(((110 + 150 + 125) / 3) / 120, 4)
    assert (found.low, found.high) == (round(110 / 140, 4), round(150 / 100, 4))


def test_groups_apart_give_their_ratio_beyond_the_spread():
    found = verdict.compare(runs("plain", 100, 104, 98), runs("skip-locked", 310, 300, 305))
    assert found.stands is True
    assert found.sentence.startswith("skip-locked / plain, tps: 3.03× (2.88–3.16× across 3 and 3 runs): "
                                     "beyond the run-to-run spread.")


def test_ranges_that_barely_miss_each_other_do_not_stand():
    """Two runs each whose ranges do not overlap, but whose means differ by less than a range: noise."""
    found = verdict.compare(runs("a", 100, 120), runs("b", 121, 125))
    assert found.low > 1 and found.stands is False


def test_one_run_each_uses_its_seconds_and_says_so():
    def one(name, seconds):
        points = [{"t": float(t), "tps": v} for t, v in enumerate(seconds, start=1)]
        phases = {"connected_s": 0.01, "steady_from_s": 1.0, "steady_to_s": float(len(seconds)), "end_s": float(len(seconds))}
        return Run(name, "nb", "ci", "now", tps=sum(seconds[1:]) / (len(seconds) - 1), per_second=points, phases=phases)

    a = one("plain", [10, 100, 102, 98, 101, 99])
    b = one("skip", [10, 300, 310, 290, 305, 295])
    found = verdict.compare(a, b)
    assert found.basis == "seconds" and found.stands is True
    assert "one run of at least one side: its spread is second to second" in found.sentence
    assert "repeat to be sure" in found.sentence
    # the first second is the start: its 10 tps is not part of the spread
    assert found.low > 2.8


def test_a_client_bound_run_says_so():
    cpu = {"pgbench": 0.93, "backends": 0.6, "server_other": 0.02, "idle": 0.45, "cpus": 2, "threads": 1,
           "pgbench_per_thread": 0.93, "seconds": 4}
    waits = [{"t": 1.5, "wait": "Client: ClientRead", "backends": 6}, {"t": 1.5, "wait": "CPU", "backends": 2}]
    phases = {"connected_s": 0.0, "steady_from_s": 1.0, "steady_to_s": 3.0, "end_s": 3.0}
    a = runs("hash", 100, 101, extra={"cpu": cpu}, probes={"waits": waits}, phases=phases)
    b = runs("btree", 140, 141)
    found = verdict.compare(a, b)
    assert found.stands is True
    assert ("What held the runs back: the client: pgbench kept 93% of a core busy per thread (1 thread) in 2 of 2 "
            "hash runs; the client: its backends waited for pgbench's next statement (75% of the clients, in 2 of 2 "
            "hash runs, on average).") in found.sentence
    assert found.sentence.count("hash runs") == 2  # each kind once for the name, not once per repeat


def test_a_missing_figure_is_said_not_guessed():
    found = verdict.compare(runs("plain", 100, 101), runs("skip", 200, 201), metric="goodput")
    assert found.ratio is None and found.stands is False
    assert found.sentence == "skip / plain, goodput: no comparison, plain has no goodput figure."


def test_the_newest_repeats_of_each_name_are_kept_together():
    older = runs("plain", 50, 55)
    for run in older:
        run.series, run.started_at = "plain@older", "2026-11-26T09:00:00+00:00"
    newer = runs("plain", 100, 110, 90)
    single = [Run("skip", "nb", "ci", "2026-11-26T10:00:00+00:00", tps=300.0)]
    groups = records.latest_groups(older + newer + single)
    assert [run.tps for run in groups["plain"]] == [100, 110, 90]
    assert groups["plain"].spread("tps") == (90, 110) and groups["plain"].tps == 100.0
    assert len(groups["skip"]) == 1


def test_one_run_with_no_spread_never_stands():
    one = [Run("plain", "nb", "ci", "now", tps=100.0, latency_ms={"p99": 10.0})]
    other = [Run("skip", "nb", "ci", "now", tps=103.0, latency_ms={"p99": 10.2})]
    found = verdict.compare(one, other, metric="lat_p99_ms")
    assert found.stands is False and found.basis == "unknown"
    assert "its spread is unknown, so this says nothing sure: repeat the runs" in found.sentence
    # repeats on one side and one run with no per-second lines on the other: still unknown
    assert verdict.compare(runs("plain", 100, 101), other).stands is False


def test_a_group_that_did_no_work_gets_no_ratio_and_is_named():
    found = verdict.compare(runs("plain", 0, 0), runs("skip", 100, 110))
    assert found.ratio is None and found.stands is False
    assert found.sentence == "skip / plain, tps: no ratio: plain's tps is 0 (it completed no work to compare with)."


def test_two_runs_each_need_a_wider_gap_than_three():
    """Under pure noise, ranges that miss each other by a little are common with two runs each."""
    two = verdict.compare(runs("a", 100, 110), runs("b", 121, 130))  # apart, means 105 and 125.5: 2x range is 20
    assert two.stands is True
    close = verdict.compare(runs("a", 100, 110), runs("b", 115, 120))  # apart, but 12.5 apart < 2 x 10
    assert close.stands is False
    three = verdict.compare(runs("a", 100, 110, 105), runs("b", 115, 120, 118))  # 12.7 apart > 1 x 10
    assert three.stands is True


def test_interrupted_runs_are_left_out_and_said():
    group = runs("plain", 100, 102, 101)
    group[2].interrupted, group[2].tps = True, 5.0
    found = verdict.compare(group, runs("skip", 300, 305, 310))
    assert found.a_values == [100, 102] and "(1 interrupted run left out.)" in found.sentence


def test_waiting_for_the_client_on_a_full_machine_is_not_called_the_client_limit():
    cpu = {"pgbench": 0.3, "backends": 1.6, "server_other": 0.05, "idle": 0.02, "cpus": 2, "threads": 2,
           "pgbench_per_thread": 0.15, "seconds": 4}
    waits = [{"t": 1.5, "wait": "Client: ClientRead", "backends": 6}, {"t": 1.5, "wait": "CPU", "backends": 2}]
    phases = {"connected_s": 0.0, "steady_from_s": 1.0, "steady_to_s": 3.0, "end_s": 3.0}
    said = verdict.limits(Run("idx", "nb", "ci", "now", extra={"cpu": cpu}, probes={"waits": waits}, phases=phases))
    assert said[0] == "the CPU: the server (1.7 cores) and pgbench (0.3) used all 2 cores in idx"
    assert said[1].startswith("its backends waited for pgbench's next statement, on a machine with no CPU to spare")
    assert not any(line.startswith("the client") for line in said)
