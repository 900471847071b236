"""From recorded pgbench 18 outputs to a run record, and when a run counts as failed (no process, no server)."""

import dataclasses
import math
from pathlib import Path

from labkit import pgbench, run_record

DATA = Path(__file__).resolve().parents[1] / "data" / "pgbench"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def outputs_of(stem: str, **changes) -> run_record.Outputs:
    stderr = read(f"{stem}.stderr")
    progress = [point for point in map(pgbench.parse_progress, stderr.splitlines()) if point]
    other = "\n".join(line for line in stderr.splitlines() if not pgbench.parse_progress(line))
    values = dict(stdout=read(f"{stem}.stdout"), stderr=other, progress=progress, wall_s=4.3)
    values.update(changes)
    return run_record.Outputs(**values)


CONTEXT = run_record.Context("nb", "ci", {"backend": "embedded", "version": "18.6"}, "2026-11-22T10:00:00+00:00",
                          ("-n", "-P", "1"))


def test_a_stalled_run_becomes_a_record_with_its_stall_over_the_steady_phase():
    spec = pgbench.parse_options("-c 2 -j 1 -T 4 --name stalled", script="update t set n = n + 1;")
    samples = {"waits": [{"t": 1.0047, "wait": "Lock: transactionid", "backends": 2}]}
    run = run_record.record(spec, CONTEXT, outputs_of("pgbench18_stall", samples=samples))
    assert (run.name, run.clients, run.duration_s, run.transactions) == ("stalled", 2, 4, 43688)
    assert run.whole["tps"] == 10932.358410 and run.failures == 0 and run.errors == []
    # no transaction log: the steady phase (1-4 s) from the progress lines, 0 + 19,754.9 + 23,951.7 over 3 s
    assert run.steady["source"] == "progress lines" and run.tps == round((19754.9 + 23951.7) / 3, 1)
    assert [p["tps"] for p in run.per_second][:2] == [0.0, 0.0]
    assert run.stalls == [{"start": 1.0, "end": 2.0}]  # the first second is the start, not a stall
    assert run.overrun_s == 0.0  # its last progress line came at the planned end
    assert run.probes["waits"][0]["t"] == 1.005  # no log to align by: the probes' clock is pgbench's
    assert run.argv == ["-n", "-P", "1"] and run.server["version"] == "18.6"
    # pgbench's exit code alone does not fail a run: one that completed transactions is kept (its clients
    # that aborted are in its errors), one that completed none and said nothing fails with the code
    assert run_record.failure(outputs_of("pgbench18_stall", exit_code=2), run) is None
    assert run_record.failure(outputs_of("pgbench18_stall", exit_code=2),
                              dataclasses.replace(run, transactions=0)) == "pgbench exited with code 2"


def test_the_transaction_log_gives_100ms_bins_and_percentiles():
    spec = pgbench.parse_options("-c 2 -T 4", script="select 1;")
    log = pgbench.log_frame(DATA / "pgbench18_txlog.txlog")
    run = run_record.record(spec, CONTEXT, outputs_of("pgbench18_transactions", transaction_log=log))
    # 100 ms bins from pgbench's zero to the run's end: a run not interrupted ran to its -T (this log is an excerpt)
    assert run.fine_width_s == 0.1 and len(run.fine) == math.ceil(run.phases["end_s"] / 0.1 - 1e-9) == 40
    assert sum(b["tps"] for b in run.fine) * 0.1 == 300  # every logged transaction in one bin
    assert 0 < run.latency_ms["p50"] <= run.latency_ms["p99"] <= run.latency_ms["max"]


def test_a_script_error_is_a_failure_with_pgbench_own_words():
    spec = pgbench.parse_options("-c 2 -T 2", script="select 1/0;")
    outputs = outputs_of("pgbench18_sql_error", exit_code=2)
    run = run_record.record(spec, CONTEXT, outputs)
    assert run.transactions == 0
    assert run_record.failure(outputs, run).startswith("ERROR:  division by zero")  # what that recording's script hit


def test_an_interrupted_run_is_not_a_failure():
    spec = pgbench.parse_options("-c 2 -T 2", script="select 1;")
    outputs = outputs_of("pgbench18_sql_error", exit_code=-2, interrupted=True)
    assert run_record.failure(outputs, run_record.record(spec, CONTEXT, outputs)) is None


def test_failures_by_kind_and_retries_are_kept_in_the_record():
    """Serialization and deadlock failures are the lesson in a concurrency lab: the record keeps them."""
    spec = pgbench.parse_options("-c 4 -j 1 -T 3 --max-tries 5", script="update hot set n = n + 1 where id = 1;")
    run = run_record.record(spec, CONTEXT, outputs_of("pgbench18_retries"))
    assert (run.failures, run.serialization_failures, run.deadlock_failures) == (2313, 2313, 0)
    assert (run.retried, run.retries) == (9047, 22639)
    from labkit.records import Run

    assert Run.from_dict(run.to_dict()).serialization_failures == 2313
