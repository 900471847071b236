"""The verdict: a rate's ratio with its interval (pairs of interleaved runs, or not), a cost per repeat, what held runs back."""

from labkit import records, verdict
from labkit.records import Run

STEADY = {"connected_s": 0.0, "steady_from_s": 1.0, "steady_to_s": 4.0, "end_s": 4.0}


def runs(name, *tps, **fields):
    fields.setdefault("phases", STEADY)
    return [Run(name, "nb", "ci", "now", tps=t, repeat=i, repeats=len(tps), series=f"{name}@now", **fields)
            for i, t in enumerate(tps, start=1)]


def interleaved(a_values, b_values, *, a="a", b="b", **fields):
    """Two arms of one experiment run A B, B A, A B ...: each run tagged with its place in the order."""
    fields.setdefault("phases", STEADY)
    a_runs, b_runs, position = [], [], 0
    for number, (x, y) in enumerate(zip(a_values, b_values), start=1):
        first, second = ((a, x, a_runs), (b, y, b_runs)) if number % 2 else ((b, y, b_runs), (a, x, a_runs))
        for name, value, group in (first, second):
            position += 1
            group.append(Run(name, "nb", "laptop", "now", tps=value, repeat=number, experiment="e@now", order=position,
                             series=f"{name}@e", **fields))
    return a_runs, b_runs


def test_groups_that_were_not_interleaved_say_so_and_overlap_is_noise():
    found = verdict.compare(runs("plain", 100, 140, 120), runs("spread", 110, 150, 125))
    assert found.stands is False and found.basis == "repeats"
    assert "from 3 and 3 runs, not interleaved" in found.sentence and "within noise" in found.sentence
    assert found.ratio == round((110 * 150 * 125 / (100 * 140 * 120)) ** (1 / 3), 4)  # the geometric means' ratio


def test_far_apart_groups_stand():
    found = verdict.compare(runs("plain", 100, 104, 98), runs("skip-locked", 310, 300, 305))
    assert found.stands is True and found.outcome == "stands"
    assert found.sentence.startswith("skip-locked / plain, tps: 3.03× (2.85–3.22×, ") and "beyond the run-to-run noise" in found.sentence


def test_interleaved_pairs_cancel_a_drift_that_spreads_each_arm():
    # the machine slows down run after run; b is 10% faster in every pair
    a, b = interleaved([300, 200, 100], [331, 219, 111])
    found = verdict.compare(a, b)
    assert found.basis == "pairs" and found.stands is True
    assert "from 3 interleaved pairs" in found.sentence
    assert 1.08 < found.low < 1.1 < found.high < 1.13
    # the same values without the pairing: the drift hides the effect
    unpaired = verdict.compare([Run("a", "nb", "ci", "now", tps=v, phases=STEADY) for v in (300, 200, 100)],
                               [Run("b", "nb", "ci", "now", tps=v, phases=STEADY) for v in (331, 219, 111)])
    assert unpaired.stands is False


def test_an_aa_comparison_whose_load_changes_at_the_second_arm_does_not_stand_when_interleaved():
    # A B B A A B: the machine is quiet for the first run only, then three busy processes start
    tps = {1: 100, 2: 50, 3: 50, 4: 50, 5: 50, 6: 50}
    a, b = interleaved([tps[1], tps[4], tps[5]], [tps[2], tps[3], tps[6]])
    found = verdict.compare(a, b)
    assert found.basis == "pairs" and found.stands is False
    # run back to back (A A A, then B B B) the same change reads as an effect: the sentence says it was not interleaved
    back_to_back = verdict.compare(runs("a", 100, 101, 99), runs("b", 50, 51, 49))
    assert back_to_back.stands is True and "not interleaved" in back_to_back.sentence


def test_one_steady_second_is_too_short_to_tell():
    short = {"connected_s": 0.4, "steady_from_s": 1.0, "steady_to_s": 2.0, "end_s": 2.1}
    found = verdict.compare(runs("plain", 100, 101, 99, phases=short), runs("skip", 300, 301, 299, phases=short))
    assert found.stands is False and found.basis == "too short" and found.outcome == "too short"
    assert "the shortest run had 1 steady second: too short to tell" in found.sentence
    assert "beyond" not in found.sentence


def test_one_run_each_uses_its_seconds_and_says_so():
    def one(name, seconds):
        points = [{"t": float(t), "tps": v} for t, v in enumerate(seconds, start=1)]
        phases = {"connected_s": 0.01, "steady_from_s": 1.0, "steady_to_s": float(len(seconds)),
                  "end_s": float(len(seconds))}
        return Run(name, "nb", "ci", "now", tps=sum(seconds[1:]) / (len(seconds) - 1), per_second=points, phases=phases)

    found = verdict.compare(one("plain", [10, 100, 102, 98, 101, 99]), one("skip", [10, 300, 310, 290, 305, 295]))
    assert found.basis == "seconds" and found.stands is True
    assert "one run of at least one side: its spread is second to second" in found.sentence
    assert "repeat to be sure" in found.sentence
    assert found.low > 2.8  # the first second is the start: its 10 tps is not part of the spread


def test_a_size_whose_repeats_differ_by_an_autovacuum_visit_is_judged_per_repeat_with_the_visit_named():
    visited = {"events": {"autovacuum": 1, "autoanalyze": 0, "checkpoints": 0}}
    expression = [Run("expression-index", "nb", "laptop", "now", extra={"table_bytes": 5_600_000}),
                  Run("expression-index", "nb", "laptop", "now", extra={"table_bytes": 9_700_000, **visited})]
    generated = [Run("generated-column", "nb", "laptop", "now", extra={"table_bytes": 1_000_000}),
                 Run("generated-column", "nb", "laptop", "now", extra={"table_bytes": 990_000})]
    found = verdict.compare(expression, generated, metric="table_bytes")
    assert found.kind == "cost" and found.basis == "per repeat" and found.stands is True and found.outcome == "apart"
    assert "every generated-column repeat at most 0.18× every expression-index repeat" in found.sentence
    assert found.events == {"expression-index 2": "an autovacuum visit"}
    assert "expression-index 2: an autovacuum visit" in found.sentence
    assert found.limits == [] and "CPU" not in found.sentence and "noise" not in found.sentence


def test_sizes_within_the_gap_cannot_be_told_apart():
    a = [Run("a", "nb", "ci", "now", extra={"pages": p}) for p in (12, 13)]
    b = [Run("b", "nb", "ci", "now", extra={"pages": p}) for p in (13, 14)]
    found = verdict.compare(a, b, metric="pages")
    assert found.stands is False and "cannot tell from them" in found.sentence


def test_a_client_bound_run_says_so():
    cpu = {"pgbench": 0.93, "backends": 0.6, "server_other": 0.02, "idle": 0.45, "cpus": 2, "threads": 1,
           "pgbench_per_thread": 0.93, "samples": 12, "every_s": 0.25}
    waits = [row for t in (1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0)
             for row in ({"t": t, "wait": "Client: ClientRead", "backends": 6}, {"t": t, "wait": "CPU", "backends": 2})]
    a = runs("hash", 100, 101, extra={"cpu": cpu}, probes={"waits": waits})
    found = verdict.compare(a, runs("btree", 140, 141))
    assert found.limits == ["the client: pgbench kept 93% of a core busy per thread (1 thread) in 2 of 2 hash runs",
                            "the client: its backends waited for pgbench's next statement (75% of the clients, in "
                            "2 of 2 hash runs, on average)"]
    assert "What held the runs back: the client" in found.details()


def test_wait_shares_need_enough_samples():
    few = [{"t": 1.5, "wait": "Lock: transactionid", "backends": 8}]
    assert verdict.wait_shares(Run("r", "nb", "ci", "now", probes={"waits": few}, phases=STEADY)) == {}


def test_idle_in_transaction_is_waiting_for_the_client():
    waits = [row for t in (1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0)
             for row in ({"t": t, "wait": "idle in transaction", "backends": 40},
                         {"t": t, "wait": "Client: ClientRead", "backends": 17}, {"t": t, "wait": "CPU", "backends": 7})]
    shares = verdict.wait_shares(Run("r", "nb", "ci", "now", probes={"waits": waits}, phases=STEADY))
    assert round(shares["Client"], 2) == round(57 / 64, 2)


def test_with_idle_cores_other_processes_are_not_named():
    cpu = {"pgbench": 0.1, "backends": 0.3, "server_other": 0.0, "idle": 0.9, "cpus": 2, "threads": 1,
           "pgbench_per_thread": 0.1, "samples": 12, "every_s": 0.25}  # 0.7 cores to others, 0.9 left idle
    assert verdict.limits(Run("r", "nb", "ci", "now", extra={"cpu": cpu}, phases=STEADY)) == []
    busy = {**cpu, "idle": 0.0}
    assert verdict.limits(Run("r", "nb", "ci", "now", extra={"cpu": busy}, phases=STEADY)) == [
        "other processes on this machine used 1.6 of its 2 cores in r (pgbench 0.1, the server 0.3)"]


def test_a_cpu_split_of_a_few_samples_says_nothing():
    cpu = {"pgbench": 0.95, "backends": 1.0, "server_other": 0.0, "idle": 0.0, "cpus": 2, "threads": 1,
           "pgbench_per_thread": 0.95, "samples": 3, "every_s": 0.25}
    assert verdict.limits(Run("r", "nb", "ci", "now", extra={"cpu": cpu}, phases=STEADY)) == []


def cpu_left(idle):
    return {"cpu": {"pgbench": 0.2, "backends": 0.6, "server_other": 0.0, "idle": idle, "cpus": 2,
                    "samples": 12, "every_s": 0.25}}


def test_a_change_of_load_between_the_arms_is_reported():
    found = verdict.compare(runs("a", 100, 102, 101, extra=cpu_left(1.2)), runs("b", 50, 52, 51, extra=cpu_left(0.0)))
    assert found.notes == ["Other processes used 0.0 of the 2 cores during a runs, 1.2 during b runs: run back to "
                           "back, the machine may have changed between the arms."]


def test_what_an_arm_leaves_other_processes_is_not_a_change_of_load():
    # interleaved, b's backends sleep on a lock: a busy neighbour takes 1.2 cores in each b run, none in a's
    a, b = interleaved([100, 102, 101], [50, 52, 51], extra=cpu_left(1.2))
    for run in b:
        run.extra = cpu_left(0.0)
    found = verdict.compare(a, b)
    assert found.basis == "pairs" and found.stands is True and "left out" not in found.sentence
    assert found.notes == ["Other processes used 0.0 of the 2 cores during a runs, 1.2 during b runs: the runs were "
                           "interleaved, so that is what each arm left them."]


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
    assert verdict.compare(runs("plain", 100, 101), other).stands is False


def test_a_group_that_did_no_work_gets_no_ratio_and_is_named():
    found = verdict.compare(runs("plain", 0, 0), runs("skip", 100, 110))
    assert found.ratio is None and found.stands is False
    assert found.sentence == "skip / plain, tps: no ratio: plain's tps is 0 (it completed no work to compare with)."


def test_two_pairs_give_a_wide_interval_not_a_sure_one():
    a, b = interleaved([100, 110], [121, 130])  # 1.21 and 1.18: a t with one degree of freedom
    found = verdict.compare(a, b)
    assert found.basis == "pairs" and found.high / found.low > 1.2 and found.stands is True
    a, b = interleaved([100, 110], [115, 112])  # 1.15 and 1.02
    assert verdict.compare(a, b).stands is False


def test_interrupted_runs_are_left_out_and_said():
    group = runs("plain", 100, 102, 101)
    group[2].interrupted, group[2].tps = True, 5.0
    found = verdict.compare(group, runs("skip", 300, 305, 310))
    assert found.a_values == [100, 102] and "(1 interrupted run left out.)" in found.sentence


def test_waiting_for_the_client_on_a_full_machine_is_not_called_the_client_limit():
    cpu = {"pgbench": 0.3, "backends": 1.6, "server_other": 0.05, "idle": 0.02, "cpus": 2, "threads": 2,
           "pgbench_per_thread": 0.15, "samples": 12, "every_s": 0.25}
    waits = [row for t in (1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0)
             for row in ({"t": t, "wait": "Client: ClientRead", "backends": 6}, {"t": t, "wait": "CPU", "backends": 2})]
    said = verdict.limits(Run("idx", "nb", "ci", "now", extra={"cpu": cpu}, probes={"waits": waits}, phases=STEADY))
    assert said[0] == "the CPU: the server (1.7 cores) and pgbench (0.3) used all 2 cores in idx"
    assert said[1].startswith("its backends waited for pgbench's next statement, on a machine with no CPU to spare")
    assert not any(line.startswith("the client") for line in said)


def test_a_pair_within_which_the_machine_changed_is_left_out_and_said():
    def cpu(others):
        return {"cpu": {"pgbench": 0.1, "backends": 0.9, "server_other": 0.0, "idle": 1.0 - others, "cpus": 2,
                        "samples": 12, "every_s": 0.25}}

    # A B | B A | A B | B A: three busy processes start before the fourth run (an A), halving its tps
    a, b = interleaved([100, 50, 50, 50], [80, 80, 40, 40])
    for run in a + b:
        run.extra = cpu(1.0 if run in a[1:] + b[2:] else 0.0)
    found = verdict.compare(a, b)
    assert found.basis == "pairs" and found.stands is True and 0.79 < found.ratio < 0.81
    assert "from 3 interleaved pairs; 1 more left out: the machine's load changed within them" in found.sentence
    everything = verdict.compare(a[:2], b[:2])  # two pairs, one of them changed: too few left
    assert everything.basis == "load changed" and everything.outcome == "load changed"
    assert "cannot tell" in everything.sentence
