"""The horizon probe on recorded runs of a real server (``tests/data/runs/record_horizon.py``): ties kept, the holder named."""

import json
from pathlib import Path

from labkit.probes import horizon_holders, longest_held
from labkit.records import Run

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"


def recorded(name: str) -> Run:
    return Run.from_dict(json.loads((RUNS / f"{name}.json").read_text(encoding="utf-8")))


def waits_for_a_lock(row: dict) -> bool:
    return row["doing"].startswith("Lock:")


def test_a_horizon_probe_with_tied_xmins_shows_the_flusher():
    run = recorded("horizon-flush")
    holders = horizon_holders(run.probes["horizon"])
    # instants where the flusher and backends waiting for its row tie: their snapshots were taken during one flush
    tied = [holder for holder in holders if holder["tied_in_lock_waits"] and holder["holds_by"] == "its snapshot"]
    assert tied, "the recording has no tie between a flusher and a waiter: record it again"
    for holder in tied:
        assert not waits_for_a_lock(holder) and holder["who"].startswith("labkit-run-"), holder
        assert holder["query"].startswith("update test set crt_time"), holder
        rows = [row for row in run.probes["horizon"] if row["t"] == holder["t"]]
        assert len(rows) == holder["tied"] > 1 and holder["open_s"] == max(row["open_s"] for row in rows)
    longest, samples = longest_held(run.probes["horizon"])
    assert samples == len(holders) and not waits_for_a_lock(longest) and longest["pid"] in {h["pid"] for h in tied}
    # the probe as it was (the oldest by age alone, limit 1) named a backend waiting for the flusher's row instead
    waiters_named = {row["pid"] for row in run.probes["horizon-before"] if row["doing"].startswith("Lock:")}
    assert waiters_named and not waiters_named & {holder["pid"] for holder in holders}


def test_every_client_ties_with_an_idle_transaction_id_and_the_idle_session_is_named():
    run = recorded("horizon-idle")
    holders = horizon_holders(run.probes["horizon"])
    assert holders and all(holder["who"] == "labkit-idle" and holder["doing"] == "idle in transaction"
                           and holder["holds_by"] == "its transaction id" for holder in holders), holders
    # the clients' snapshots carry the idle session's id as their xmin: they tie with it
    assert max(holder["tied"] for holder in holders) > 1
    clients = [row for row in run.probes["horizon"] if row["who"] != "labkit-idle"]
    assert clients and all(row["holds_by"] == "its snapshot" for row in clients)
