"""A run's start, steady phase and tail, from recorded pgbench 18 runs (tests/data/pgbench/README.md)."""

import dataclasses
from pathlib import Path

import pytest

from labkit import charts, pgbench, records, run_record

DATA = Path(__file__).resolve().parents[1] / "data" / "pgbench"
CONTEXT = run_record.Context("nb", "ci", {"backend": "embedded", "version": "18.6"}, "2026-11-26T10:00:00+00:00",
                             ("-n", "-P", "1", "-c", "140", "-j", "1"))


def recorded(stem: str, options: str, *, popen_epoch: float, wall_s: float, samples=None):
    stderr = (DATA / f"{stem}.stderr").read_text(encoding="utf-8")
    progress = [point for point in map(pgbench.parse_progress, stderr.splitlines()) if point]
    outputs = run_record.Outputs(
        stdout=(DATA / f"{stem}.stdout").read_text(encoding="utf-8"), stderr="", progress=progress, wall_s=wall_s,
        transaction_log=pgbench.log_frame(DATA / f"{stem}.txlog"), samples=samples or {}, started_epoch=popen_epoch)
    spec = pgbench.parse_options(options, script="select 1;")
    return run_record.record(spec, CONTEXT, outputs)


def slow_connect(samples=None):
    """140 clients that take 2.2 s of a 4 s run to connect (a login trigger slows each connection)."""
    return recorded("pgbench18_slow_connect", "-c 140 -j 1 -T 4 --name slow", popen_epoch=1795691580.8547237,
                    wall_s=4.099, samples=samples)


def tail():
    """8 clients, -T 3: three of them sleep 2.5 s a transaction and finish theirs at 5 s."""
    return recorded("pgbench18_tail", "-c 8 -j 2 -T 3 --name tail", popen_epoch=1795691584.9571567, wall_s=5.036)


def test_a_run_whose_clients_connect_for_2_s_of_4_is_summarized_over_its_last_second():
    waits = [{"t": t, "wait": "Client: ClientRead" if t < 2.3 else "CPU", "backends": 140}
             for t in (0.5, 1.0, 1.5, 2.0, 3.2, 3.5, 3.8)]
    run = slow_connect({"waits": waits})
    # pgbench: 2,213 ms to connect; its first progress line (2.2 s, 0 tps) covers the connecting
    assert run.phases["connected_s"] == 2.213
    assert (run.phases["steady_from_s"], run.phases["steady_to_s"]) == (3.0, 4.0)
    assert run.phase_of(1.0) == "start" and run.phase_of(3.5) == "steady"
    # tps over 3-4 s only, from the log: the clients each do a 50 ms transaction, about 2,760/s
    log = pgbench.log_frame(DATA / "pgbench18_slow_connect.txlog")
    zero = pgbench.log_start(log) - 2.213497
    in_steady = ((log.end_s > zero + 3) & (log.end_s <= zero + 4)).sum()
    assert run.steady["transactions"] == in_steady and run.tps == pytest.approx(in_steady, rel=1e-6)
    assert 2600 < run.tps < 2900 and run.tps > run.whole["tps"]  # pgbench's 2,676 counts from 2.2 s
    assert 50 <= run.latency_ms["p50"] <= 52
    # no stall: the first line's zero is the start; the 0.8 s line that follows is too
    assert run.stalls == [] and run.stall_seconds == 0
    assert [row["phase"] for row in run.to_frame().to_dict("records")] == ["start", "start", "steady"]
    # the probes' clock: pgbench's zero came 16 ms after the process started (exec, its setup connection)
    assert run.probes["waits"][0]["t"] == round(0.5 - 0.016, 3)
    waits_now = records.waits_frame([run])
    assert list(waits_now.index) == ["CPU"]  # the connecting seconds' ClientRead are the start's
    assert records.waits_frame([run], during="start").loc["Client: ClientRead", "slow"] == 140


def test_the_tail_after_the_planned_end_is_reported_with_the_clients_still_running():
    run = tail()
    assert run.phases["planned_end_s"] == 3.0 and run.phases["steady_to_s"] == 3.0
    assert run.phases["clients_after"] == 3  # clients 0-2 were in a 2.5 s sleep at -T
    assert 1.9 < run.overrun_s == run.phases["tail_s"] < 2.1
    # the last two progress lines (4 tps, then 0) are the tail: no stall in the steady phase
    assert run.stalls == []
    assert run.to_frame("tail")["t"].tolist() == [4.0, 5.0]
    assert "after the planned end: 2.0 s, 3 clients still running" in run.phases_sentence()
    # the fine bins go on through the tail, and hold every logged transaction
    assert run.fine[-1]["t"] >= run.phases["end_s"] - 0.1
    assert round(sum(b["tps"] for b in run.fine) * 0.1) == 1446


def test_the_timeline_shades_the_start_and_the_tail_apart_from_stalls():
    run = tail()
    run.stalls = [{"start": 1.0, "end": 2.0}]
    figure = charts.timeline(run)
    names = [shape.name for shape in figure.layout.shapes]
    assert names.count("start") == 1 and names.count("tail") == 1 and names.count("stall") == 1
    start = next(shape for shape in figure.layout.shapes if shape.name == "start")
    end = next(shape for shape in figure.layout.shapes if shape.name == "tail")
    assert (start.x0, start.x1) == (0, 1.0) and (end.x0, end.x1) == (3.0, run.phases["end_s"])
    assert start.fillcolor != end.fillcolor != charts.STALL_COLOR


def test_failures_written_by_failures_detailed_count_in_the_bins():
    """With --failures-detailed pgbench logs the kind of failure instead of "failed"."""
    log = pgbench.log_frame("0 1 serialization 0 1000 100000\n0 2 deadlock 0 1000 150000\n0 3 500 0 1000 180000\n"
                            "1 1 skipped 0 1000 190000\n")
    bins = pgbench.bin_log(log, 1000.0, 0.1, end_s=1000.2)
    assert [b.failed for b in bins] == [0, 2]
    assert pgbench.window_figures(log, 1000.0, 1000.2)["failures"] == 2


def test_a_record_without_phases_reads_as_all_steady():
    run = records.Run("old", "nb", "ci", "2026-11-01T00:00:00+00:00", probes={"waits": [{"t": 0.1, "wait": "CPU",
                                                                                        "backends": 1}]})
    assert run.phase_of(0.1) == "steady" and records.waits_frame([run]).loc["CPU", "old"] == 1


def test_a_log_line_cut_short_by_an_interrupt_is_dropped():
    log = pgbench.log_frame("0 1 500 0 1000 100000\n1 1 700 0 1000 150000\n0 2 6")
    assert len(log) == 2 and [b.tps for b in pgbench.bin_log(log, 1000.0, 0.1, end_s=1000.2)] == [0.0, 20.0]


def test_a_probe_that_read_only_zeros_says_what_it_cannot_see():
    samples = {"waiting": [{"t": t / 4, "waiting": 0} for t in range(1, 13)],
               "dead": [{"t": 1.0, "n_dead": 0}, {"t": 2.0, "n_dead": 5}]}
    costs = [{"name": "waiting", "every_s": 0.25, "samples": 12}, {"name": "dead", "every_s": 1.0, "samples": 2}]
    notes = run_record.blind_probes(samples, costs)
    assert list(notes) == ["waiting"]
    assert notes["waiting"].startswith("probe 'waiting' read 0 in all 12 samples, one every 0.25 s: an event "
                                       "shorter than that")
    run = records.Run("r", "nb", "ci", "now", probes=samples, extra={"probe_notes": notes},
                      per_second=[{"t": 1.0, "tps": 5.0}])
    figure = charts.timeline(run)
    assert [a.text.replace("<br>", " ") for a in figure.layout.annotations if a.name == "probe note"] == [
        notes["waiting"]]


def _arrivals(stem: str, connected_s: float, delay_s: float = 0.002) -> tuple[list, list[float], float]:
    """The recorded progress lines, and when each would have come: pgbench's zero + its t + a little delay."""
    stderr = (DATA / f"{stem}.stderr").read_text(encoding="utf-8")
    progress = [point for point in map(pgbench.parse_progress, stderr.splitlines()) if point]
    zero = pgbench.log_start(pgbench.log_frame(DATA / f"{stem}.txlog")) - connected_s
    return progress, [zero + point.t + delay_s * (1 + index) for index, point in enumerate(progress)], zero


def test_an_interrupted_run_without_its_summary_keeps_its_clock_from_the_progress_lines():
    """pgbench prints no summary when it is interrupted: zero from the progress lines, connection from the log."""
    progress, arrivals, zero = _arrivals("pgbench18_slow_connect", 2.213497)
    outputs = run_record.Outputs(stdout="", stderr="", progress=progress, wall_s=4.099, progress_arrivals=arrivals,
                                 transaction_log=pgbench.log_frame(DATA / "pgbench18_slow_connect.txlog"),
                                 started_epoch=zero - 0.016, interrupted=True)
    run = run_record.record(pgbench.parse_options("-c 140 -j 1 -T 4 --name cut", script="select 1;"), CONTEXT, outputs)
    assert abs(run.phases["connected_s"] - 2.213) < 0.01
    assert (run.phases["steady_from_s"], run.phases["steady_to_s"]) == (3.0, 4.0)
    assert 2600 < run.tps < 2900  # not the 560 a clock shifted by the connection time gave


def test_a_sampled_log_gives_no_count_of_clients_in_the_tail():
    """A sampled log cannot say which clients were still running, nor when the first one ended."""
    progress, arrivals, zero = _arrivals("pgbench18_tail", 0.024524)
    full = pgbench.log_frame(DATA / "pgbench18_tail.txlog")
    outputs = run_record.Outputs(stdout=(DATA / "pgbench18_tail.stdout").read_text(encoding="utf-8"), stderr="",
                                 progress=progress, wall_s=5.036, progress_arrivals=arrivals,
                                 transaction_log=full.iloc[::20].reset_index(drop=True), started_epoch=zero - 0.012)
    spec = pgbench.parse_options("-c 8 -j 2 -T 3 --sampling-rate 0.05 --name tail", script="select 1;")
    run = run_record.record(spec, CONTEXT, outputs)
    assert run.phases["clients_after"] is None and run.phases["steady_to_s"] == 3.0
    assert "still running" not in run.phases_sentence()


def test_a_rate_limited_run_takes_its_zero_from_the_progress_lines_not_the_log():
    """With -R a logged latency counts from the transaction's schedule, not from when it began."""
    progress, arrivals, zero = _arrivals("pgbench18_tail", 0.024524)
    log = pgbench.log_frame(DATA / "pgbench18_tail.txlog")
    log["latency_ms"] = log["latency_ms"] + 250  # each transaction scheduled 250 ms before it began
    outputs = run_record.Outputs(stdout=(DATA / "pgbench18_tail.stdout").read_text(encoding="utf-8"), stderr="",
                                 progress=progress, wall_s=5.036, progress_arrivals=arrivals, transaction_log=log,
                                 started_epoch=zero - 0.012)
    run = run_record.record(pgbench.parse_options("-c 8 -j 2 -T 3 -R 500 --name rated", script="select 1;"),
                            CONTEXT, outputs)
    # zero from the progress lines (2 ms late): the fine bins start there, not 250 ms early as the log says
    assert run.phases["connected_s"] == 0.025 and run.phases["steady_from_s"] == 1.0
    assert run.fine[0]["t"] == 0.1 and run.fine[0]["tps"] > 0  # the log's zero, 250 ms early, left 0.1-0.3 s empty


def test_a_run_without_a_transaction_log_is_recorded_from_its_progress_lines():
    """--no-log, or an interrupt that lost pgbench's buffered log: no log at all, or an empty one."""
    progress, arrivals, zero = _arrivals("pgbench18_tail", 0.024524)
    for log in (None, pgbench.log_frame("\n")):
        outputs = run_record.Outputs(stdout=(DATA / "pgbench18_tail.stdout").read_text(encoding="utf-8"), stderr="",
                                     progress=progress, wall_s=5.036, progress_arrivals=arrivals, transaction_log=log,
                                     started_epoch=zero - 0.012)
        run = run_record.record(pgbench.parse_options("-c 8 -j 2 -T 3 --no-log --name nolog", script="select 1;"),
                                CONTEXT, outputs)
        assert run.steady["source"] == "progress lines" and run.fine == []
        assert (run.phases["steady_from_s"], run.phases["steady_to_s"]) == (1.0, 3.0)
        assert run.tps == round((485.0 + 483.0) / 2, 1)


def test_a_sampled_log_still_runs_its_steady_phase_to_the_planned_end():
    """pgbench often prints no progress line at -T itself: the last one must not cut the steady phase short."""
    progress, arrivals, zero = _arrivals("pgbench18_tail", 0.024524)
    early = [point for point in progress if point.t <= 2.0]  # as if the 3.0 s line never came
    full = pgbench.log_frame(DATA / "pgbench18_tail.txlog")
    outputs = run_record.Outputs(stdout=(DATA / "pgbench18_tail.stdout").read_text(encoding="utf-8"), stderr="",
                                 progress=early, wall_s=5.036, progress_arrivals=arrivals[:len(early)],
                                 transaction_log=full.iloc[::10].reset_index(drop=True), started_epoch=zero - 0.012)
    run = run_record.record(pgbench.parse_options("-c 8 -j 2 -T 3 --sampling-rate 0.1 --name s", script="select 1;"),
                            CONTEXT, outputs)
    assert run.phases["steady_to_s"] == 3.0 and run.phases["end_s"] > 4.9



def test_a_complete_log_ends_the_run_at_its_last_transaction_not_when_its_exit_was_read():
    """The counter of a work probe stops at the last commit: that, not a late reading of pgbench's exit, ends the run.

    Here the exit is read 0.8 s late (a busy machine, a slow observer). The count read after the run, placed
    there, spread the last second's work over 1.8 s: the steady goodput came out 0.57 of the truth.
    """
    progress, arrivals, zero = _arrivals("pgbench18_slow_connect", 2.213497)
    log = pgbench.log_frame(DATA / "pgbench18_slow_connect.txlog")
    ends = sorted(log["end_s"] - zero)
    last = ends[-1]

    def done_by(t: float) -> int:  # a counter of work: one unit per two transactions, as a probe reads it
        return sum(1 for end in ends if end <= t) // 2

    samples = {"work": [{"t": round(t + 0.016, 3), "work": done_by(t)} for t in (0.05, 1.05, 2.05, 3.05)]}
    outputs = run_record.Outputs(stdout=(DATA / "pgbench18_slow_connect.stdout").read_text(encoding="utf-8"),
                                 stderr="", progress=progress, wall_s=last + 0.016 + 0.8, progress_arrivals=arrivals,
                                 transaction_log=log, started_epoch=zero - 0.016, samples=samples)
    run = run_record.record(pgbench.parse_options("-c 140 -j 1 -T 4 --name late", script="select 1;"),
                            CONTEXT, outputs)
    assert run.phases["end_s"] == pytest.approx(last, abs=0.005)  # the last transaction, not the exit read later
    run.extra.update(run_record.work_figures(0, done_by(last + 1), run))
    assert run.extra["goodput_basis"] == "steady phase"
    # the phase's start still falls between two samples a second apart: read linearly there
    assert run.extra["goodput"] == pytest.approx(run.tps / 2, rel=0.05)
    # without a log of every transaction, pgbench's exit bounds the run: when its reader saw the output close
    sampled = dataclasses.replace(outputs, transaction_log=log.iloc[::20].reset_index(drop=True),
                                  ended_epoch=zero + last + 0.3)
    spec = pgbench.parse_options("-c 140 -j 1 -T 4 --sampling-rate 0.05 --name sampled", script="select 1;")
    assert run_record.record(spec, CONTEXT, sampled).phases["end_s"] == pytest.approx(last + 0.3, abs=0.005)
