"""Lab 01: the GIN pending list, from the records the notebook saved; pruning and a flush, from its steps."""

import re
import time

import numpy as np
import pytest

from labkit import records
from labkit.experiment import plan
from labkit.probes import horizon_holders
from labkit.profiles import Profile
from labkit.verdict import MIN_STEADY_S, compare, pairs, steady_pairs, steady_seconds

from .steps import python_cell, steps_spec

pytestmark = pytest.mark.integration

NOTEBOOK = "01-gin-pending-list"
ARMS = ["fastupdate-off", "off-open-xid", "pending-64kB"]  # the experiment's arms, the control first
FIGURES = {"non_hot_share", "non_hot_share_steady", "steady_counted_s", "tail_s", "updates", "table_mb", "gin_mb", "pending_pages_max", "horizon_samples",
           "horizon_open_s_max", "horizon_holder"}


def experiment(lab_runs) -> dict[str, records.Repeats]:
    """The newest experiment's runs, by arm."""
    lab_runs(NOTEBOOK, ARMS)
    groups = records.latest_groups(records.list_runs(notebook=NOTEBOOK))
    return {name: groups[name] for name in ARMS}


def test_the_arms_ran_interleaved_each_on_a_table_of_its_own(lab_runs):
    arms = experiment(lab_runs)
    runs = sorted((run for group in arms.values() for run in group), key=lambda run: run.order)
    repeats = Profile.named(runs[0].profile).repeats
    assert len({run.experiment for run in runs}) == 1 and [run.order for run in runs] == list(range(1, len(runs) + 1))
    assert [run.name for run in runs] == plan(ARMS, repeats)  # A B C, C B A, ...
    for run in runs:
        assert run.mode == "prepared" and run.failures == 0 and not run.errors, run.name
        assert (run.clients, run.duration_s) == (runs[0].clients, runs[0].duration_s)
        assert FIGURES <= set(run.extra), f"{run.name} lacks {FIGURES - set(run.extra)}"
        # a fresh table each run: its update counter holds this run's updates alone, one per transaction
        assert run.extra["updates"] == run.whole["transactions"], run.name
        # the verdict's share is the steady phase's, from the hot probe, not the whole run's with its tail
        steady = [row for row in run.probes["hot"] if run.phases["steady_from_s"] <= row["t"] <= run.phases["steady_to_s"]]
        # counted between two samples inside the phase; a busy machine can leave one in a 2 s steady phase
        # (CI did): then the share is not measured (None), never a figure from the whole run
        if len(steady) > 1:
            assert 0 <= run.extra["non_hot_share_steady"] <= 1, run.name
            # the seconds the share covers, shown beside it, are those between its first and last sample
            assert run.extra["steady_counted_s"] == round(steady[-1]["t"] - steady[0]["t"], 2) > 0, run.name
        else:
            assert run.extra["non_hot_share_steady"] is None and run.extra["steady_counted_s"] == 0, run.name
        assert run.extra["tail_s"] == run.phases["tail_s"]


def test_the_control_differs_by_one_idle_transaction_id_and_keeps_no_update_on_its_page(lab_runs):
    arms = experiment(lab_runs)
    for run in arms["fastupdate-off"] + arms["off-open-xid"]:
        assert run.extra["pending_pages_max"] == 0, run.name  # fastupdate off: no list in either
    for run in arms["fastupdate-off"]:
        assert all(holder["who"] != "labkit-idle" for holder in horizon_holders(run.probes.get("horizon") or []))
    for run in arms["off-open-xid"]:
        holders = horizon_holders(run.probes["horizon"])
        assert holders and all(holder["who"] == "labkit-idle" and holder["holds_by"] == "its transaction id"
                               and holder["doing"] == "idle in transaction" for holder in holders)
        assert max(holder["tied"] for holder in holders) > 1  # the clients' snapshots tie with it: the probe shows them
        # with the horizon held from before the run, no page of the table can be pruned: nearly no update stays HOT
        assert run.extra["non_hot_share"] > 0.9, run.extra["non_hot_share"]
        assert run.extra["non_hot_share_steady"] > 0.9, run.extra["non_hot_share_steady"]


def test_the_small_list_is_flushed_by_a_client_and_a_tie_names_the_flusher(lab_runs):
    for run in experiment(lab_runs)["pending-64kB"]:
        assert run.extra["pending_pages_max"] > 8  # past 64 kB (8 pages of 8,160 usable bytes)
        holder = run.extra["horizon_holder"]
        assert holder["who"].startswith("labkit-run-") and holder["query"].startswith("update test set crt_time")
        # a backend waiting for a lock is named only when it holds the horizon by its own id (a flusher
        # waiting to extend the index) or when every backend tied with it waits for a lock too
        for instant in horizon_holders(run.probes["horizon"]):  # the longest-held one among them
            if instant["doing"].startswith("Lock:"):
                assert (instant["holds_by"] == "its transaction id"
                        or instant["tied_in_lock_waits"] == instant["tied"]), instant
        assert run.extra["horizon_open_s_max"] == max(row["open_s"] for row in horizon_holders(run.probes["horizon"]))


def test_the_verdict_is_read_per_repeat_and_the_throughput_says_when_its_runs_are_too_short(lab_runs):
    arms = experiment(lab_runs)
    # each arm against the control, and the question's own pair: the small list against the open transaction
    for control, arm in [("fastupdate-off", ARMS[1]), ("fastupdate-off", ARMS[2]), ("off-open-xid", "pending-64kB")]:
        verdict = compare(arms[control], arms[arm], metric="non_hot_share_steady")
        assert verdict.kind == "cost" and verdict.basis == "per repeat" and verdict.ratio is not None
        tps = compare(arms[control], arms[arm], metric="tps")
        shortest = min(steady_seconds(run) for run in arms[control] + arms[arm])
        kept, changed = steady_pairs(pairs(arms[control], arms[arm]))
        if shortest < MIN_STEADY_S:
            assert tps.basis == "too short" and "too short to tell" in tps.sentence, (shortest, tps.sentence)
        elif len(kept) < 2:  # the machine's load changed within a pair: it says it cannot tell, and why
            assert tps.basis == "load changed" and "load changed" in tps.sentence and not tps.stands, tps.sentence
        else:
            assert tps.basis == "pairs" and (f"{len(changed)} more left out" in tps.sentence) == bool(changed), tps.sentence


@pytest.fixture(scope="module")
def steps_lab(fresh_lab):
    """One lab for the steps, with the notebook's test_src (its first 350 rows): each spec rebuilds its own table."""
    lab = fresh_lab("test-01-steps")
    namespace = {"np": np}
    exec(python_cell(NOTEBOOK, "texts"), namespace)  # the notebook's random_texts, as its cell has it
    lab.sql("drop table if exists test_text; create unlogged table test_text (id int, s text)")
    lab.copy("test_text", namespace["random_texts"](350))
    lab.sql("drop table if exists test_src; create table test_src as select id, to_tsvector(s) as info, "
            "now()::timestamp as crt_time from test_text; drop table test_text")
    return lab


def page(rows: list[dict]) -> dict[str, tuple[str, str, str]]:
    """``page0``'s rows by line pointer: its state, t_ctid and HOT flags."""
    return {row["lp"]: (row["line_pointer"], row["t_ctid"], row["hot"]) for row in rows}


def test_the_prune_steps_keep_the_old_versions_while_t1_is_open_then_prune_and_stay_hot(steps_lab):
    lab = steps_lab
    (run,) = lab.steps(steps_spec(NOTEBOOK, "prune-steps")).permutations
    assert all(event.waiting_s is None and event.error is None for event in run.events)  # pruning never waits
    updated = {event.step: event.rows for event in run.events if event.step.startswith("t2_update")}
    assert updated == {"t2_update1": [{"id": "1", "ctid": "(0,4)"}],  # HOT, in the room left
                       "t2_update2": [{"id": "2", "ctid": "(1,1)"}],  # no room, no pruning: page 1
                       "t2_update3": [{"id": "3", "ctid": "(0,5)"}]}  # HOT, in the room pruning made
    kept, pruned, last = [event.rows for event in run.events if event.step == "t2_page"]
    assert page(kept) == {"1": ("normal", "(0,4)", "HOT-updated"), "2": ("normal", "(1,1)", ""),
                          "3": ("normal", "(0,3)", ""), "4": ("normal", "(0,4)", "heap-only")}
    assert page(pruned) == {"1": ("redirect to 4", None, ""), "2": ("dead", None, ""),
                            "3": ("normal", "(0,3)", ""), "4": ("normal", "(0,4)", "heap-only")}
    assert page(last)["3"] == ("normal", "(0,5)", "HOT-updated") and page(last)["5"] == ("normal", "(0,5)", "heap-only")
    # the server's own count: two of the three updates were HOT (T2's counts flushed at once, not within a second)
    lab.session("T2").run("select pg_stat_force_next_flush()")
    deadline = time.monotonic() + 5
    while (counts := lab.sql("select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables where relname = 'prune_demo'")
           .iloc[0].tolist()) != [3, 2] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert counts == [3, 2]


def test_the_prune_steps_sizes_are_those_the_text_gives(steps_lab):
    lab = steps_lab
    spec = steps_spec(NOTEBOOK, "prune-steps")
    free = "select upper - lower - 4 from page_header(get_raw_page('prune_demo', 0))"  # PageGetHeapFreeSpace
    lab.steps(spec, permutation="t2_page")
    assert lab.value(free) == 2152 and lab.value("select count(*) from heap_page_items(get_raw_page('prune_demo', 0)) "
                                                 "where lp_len = 2000") == 3  # room for one 2,000-byte version
    lab.steps(spec, permutation="t2_update1")
    assert lab.value(free) == 148  # then none


def tables(text: str) -> list[list[dict]]:
    """The result tables a step printed, as the isolation tester prints them (header, dashes, rows, count)."""
    found = []
    for block in re.findall(r"^(\S[^\n]*)\n-[-+]*\n((?:[^\n]*\n)*?)\(\d+ rows?\)", text, flags=re.M):
        names = [name.strip() for name in block[0].split("|")]
        found.append([dict(zip(names, (value.strip() for value in line.split("|"))))
                      for line in block[1].splitlines() if line.strip()])
    return found


def test_the_flush_steps_empty_the_list_inside_t1s_update_while_t2_waits_for_t1s_transaction_id(steps_lab):
    (run,) = steps_lab.steps(steps_spec(NOTEBOOK, "flush-steps")).permutations
    events = {event.step: event for event in run.events}
    (before,), (moved,), (after,) = tables(events["t1_update"].text)
    assert int(before["pending_pages"]) > 8 and int(before["pending_rows"]) == 150  # past the 64 kB limit
    assert (int(after["pending_pages"]), int(after["pending_rows"])) == (0, 0)  # flushed, within T1's own step
    assert before["row_1_at"].startswith("(0,") and not moved["row_1_now_at"].startswith("(0,")  # not HOT
    waited = events["t2_update"]
    assert waited.waiting_s is not None and waited.released_by == "t1_commit" and waited.error is None
    assert waited.lock["locktype"] == "transactionid" and waited.lock["mode"] == "ShareLock"
    assert waited.lock["held_by"] == ["T1"]
    sessions = {row["session"]: row for row in events["t3_backends"].rows}
    assert sessions["T1"]["state"] == "idle in transaction" and sessions["T1"]["backend_xmin"] is None
    assert sessions["T2"]["wait"] == "Lock: transactionid"
    assert int(sessions["T2"]["backend_xmin"]) <= int(sessions["T1"]["backend_xid"])  # T2's snapshot: taken while T1 ran
    locks = {(row["session"], row["mode"], row["granted"]) for row in events["t3_locks"].rows}
    assert {("T1", "ExclusiveLock", "t"), ("T2", "ShareLock", "f")} <= locks
