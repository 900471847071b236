"""Lab 06: the stand-in for 9.2's page lock, then hash against btree, checked from the records the notebook saved."""

import pytest

from labkit import records
from labkit.experiment import plan
from labkit.records import waits_frame

from .steps import python_cell, replay, steps_spec, tagged_steps

pytestmark = pytest.mark.integration

NOTEBOOK = "06-hash-index"
ARMS = ["btree", "hash"]
STANDIN = ["shared-lock", "own-key"]


def newest_repeats(lab_runs, names: list[str]) -> dict[str, records.Repeats]:
    """The newest repeats of each name (running the lab first if its records are missing)."""
    lab_runs(NOTEBOOK, names)
    groups = records.latest_groups(records.list_runs(notebook=NOTEBOOK))
    return {name: groups[name] for name in names}


def in_order(groups: dict[str, records.Repeats]) -> list[records.Run]:
    return sorted((run for group in groups.values() for run in group), key=lambda run: run.order)


@pytest.mark.parametrize("arms", [ARMS, STANDIN], ids=["hash-btree", "stand-in"])
def test_each_experiment_ran_its_arms_interleaved(lab_runs, arms):
    groups = newest_repeats(lab_runs, arms)
    runs = in_order(groups)
    assert len({run.experiment for run in runs}) == 1 and runs[0].experiment is not None
    assert [run.order for run in runs] == list(range(1, len(runs) + 1))
    assert [run.name for run in runs] == plan(arms, len(groups[arms[0]]))  # A B, B A ...
    for run in runs:
        assert len(groups[run.name]) == run.repeats >= 2, run.name
        assert run.clients == 32 and run.mode == "prepared", run.name
        assert run.failures == 0 and run.aborted_clients == 0 and not run.errors and run.transactions > 0, run.name


def test_the_stand_in_arms_differ_in_the_key_only(lab_runs):
    groups = newest_repeats(lab_runs, STANDIN)
    scripts = {name: group.last.scripts[0]["text"] for name, group in groups.items()}
    assert scripts["own-key"] == scripts["shared-lock"].replace("'one'", "'own'") != scripts["shared-lock"]
    # every backend on one tag: its partition lock is waited for (a count, not a timing)
    manager = [waits_frame([run])[run.name].get("LWLock: LockManager", 0.0) for run in groups["shared-lock"]]
    assert max(manager) > 0, manager


def test_every_run_starts_from_a_fresh_index_after_a_checkpoint(lab_runs):
    """rebuild() ends with CHECKPOINT: no checkpoint the rebuilds left falls inside a run."""
    groups = newest_repeats(lab_runs, ARMS)
    for name in ARMS:
        befores = {run.extra["index_bytes_before"] for run in groups[name]}
        assert len(befores) == 1, (name, befores)  # the same data, rebuilt: the same size before each run
        for previous, run in zip(groups[name], groups[name][1:]):  # not the previous run's grown index
            smallest = min(row["index_mb"] for row in run.probes["index"]) * 2**20
            if previous.extra["index_bytes_after"] > previous.extra["index_bytes_before"]:  # (a hash index may not grow)
                assert smallest < previous.extra["index_bytes_after"], name
    for run in in_order(groups):
        events = run.extra["events"]
        assert events["checkpoints"] == 0 and events["checkpoint_buffers"] == 0, (run.name, run.order, events)
        assert events["autovacuum"] == 0, (run.name, events)  # autovacuum is off for the table


def test_the_working_set_fits_in_shared_buffers_and_no_update_reads_outside_them(lab_runs):
    """The runs use the profile's shared_buffers; the rebuild loads the table and its indexes into them."""
    groups = newest_repeats(lab_runs, ARMS)
    for run in in_order(groups):
        shared_bytes = int(run.server["settings"]["shared_buffers"]) * 8192
        assert run.extra["working_set_bytes"] < shared_bytes, (run.name, run.extra["working_set_bytes"], shared_bytes)
        assert float(run.extra["reads_per_update"]) == 0, (run.name, run.extra["reads_per_update"])


def test_the_hash_index_stays_smaller_than_the_btree(lab_runs):
    groups = newest_repeats(lab_runs, ARMS)
    for hash_run, btree_run in zip(groups["hash"], groups["btree"]):
        assert hash_run.extra["index_bytes_before"] < btree_run.extra["index_bytes_before"]
        assert hash_run.extra["index_bytes_after"] < btree_run.extra["index_bytes_after"]


def test_neither_index_takes_a_heavyweight_page_lock(lab_runs):
    """Since PostgreSQL 10 a hash index coordinates with buffer locks only: pg_locks, sampled during the run, agrees."""
    groups = newest_repeats(lab_runs, ARMS)
    for run in in_order(groups):
        assert run.extra["lock_samples"] >= 2 * run.duration_s - 2, run.name  # the probe did sample the run
        assert run.extra["index_page_locks_max"] == 0, run.name


def test_each_run_records_what_one_update_cost_the_server(lab_runs):
    """The notebook's PER_UPDATE check (pg_stat_statements, reset at each rebuild) and the CPU per update."""
    groups = newest_repeats(lab_runs, ARMS)
    for run in in_order(groups):
        e = run.extra
        # every transaction's update was counted, and only this run's (reset before it)
        assert run.transactions <= e["updates_counted"] <= run.transactions + run.clients, (run.name, e)
        # a heap record and an entry in each of the two indexes: three records at least per update
        assert 3 <= float(e["wal_records_per_update"]) < 6, (run.name, e)
        assert float(e["wal_bytes_per_update"]) > 100 and float(e["server_us_per_update"]) > 0, (run.name, e)
        assert float(e["buffers_per_update"]) >= 4, (run.name, e)  # the row's index lookup, heap pages, two indexes
        if (e.get("cpu") or {}).get("backends"):  # measured where labkit started the server
            assert e["backend_cpu_us_per_update"] == pytest.approx(e["cpu"]["backends"] / run.tps * 1e6, abs=0.1)


def test_every_update_of_a_hash_run_counted_itself_on_the_metapage(lab_runs):
    """The metapage's count after each hash run: the fresh index's entries plus one per update."""
    groups = newest_repeats(lab_runs, ["hash"])
    fresh = {run.extra["ntuples"] - run.extra["updates_counted"] for run in groups["hash"]}
    assert len(fresh) == 1, fresh  # the same fresh index each time
    for run in groups["hash"]:
        # every counted entry is on a page; a split whose old bucket could not be cleaned at once (another
        # backend had it pinned) leaves the moved entries' copies there too, until the next split or VACUUM
        # ("split-cleanup" in src/backend/access/hash/README; _hash_splitbucket), so the pages may hold more
        assert run.extra["live_items"] + run.extra["dead_items"] >= run.extra["ntuples"] > 0, run.extra


def test_every_hash_insertion_counts_itself_on_the_metapage(fresh_lab):
    lab = fresh_lab("test-06-metapage")
    lab.sql("""create extension if not exists pageinspect;
               create table hash_idx_test (id int primary key, info text);
               insert into hash_idx_test select g, md5(g::text) from generate_series(1, 1000) g;
               create index idx_1 on hash_idx_test using hash (info)""")
    replay(lab, tagged_steps(NOTEBOOK, "metapage"))
    namespace = {"lab": lab}
    exec(python_cell(NOTEBOOK, "metapage-python"), namespace)
    assert namespace["after"] == namespace["before"] + 1 == 1001
    (blocks,) = namespace["wal"].loc[namespace["wal"].record_type == "INSERT", "blocks"]
    assert blocks.startswith("blkref #0: blk ") and blocks.endswith("blkref #1: blk 0"), blocks  # a bucket page, then the metapage


def test_the_update_holds_fast_path_relation_locks_and_no_page_lock(fresh_lab):
    lab = fresh_lab("test-06-update-locks")
    lab.sql("""create table hash_idx_test (id int primary key, info text);
               insert into hash_idx_test select g, md5(g::text) from generate_series(1, 1000) g;
               create index idx_1 on hash_idx_test using hash (info)""")
    (run,) = lab.steps(steps_spec(NOTEBOOK, "update-locks")).permutations
    (look,) = [event.rows for event in run.events if event.step == "locks"]
    assert look == [{"locktype": "relation", "relname": name, "page": None, "mode": "RowExclusiveLock",
                     "granted": "t", "fastpath": "t"} for name in ("hash_idx_test", "hash_idx_test_pkey", "idx_1")]


@pytest.fixture(scope="module")
def lock_lab(fresh_lab):
    return fresh_lab("test-06-lock-steps")


def test_the_lock_steps_grant_both_shared_locks_and_make_the_exclusive_one_wait_for_them(lock_lab):
    spec = steps_spec(NOTEBOOK, "lock-steps")
    (standin,) = tagged_steps(NOTEBOOK, "standin")  # the runs under load take the same lock, on the same key
    assert "when 'one' then 1" in standin.sql and "perform pg_advisory_lock_shared(k);" in standin.sql
    assert "select pg_advisory_lock_shared(1);" in spec
    outcome = lock_lab.steps(spec)
    (run,) = outcome.permutations
    both, queued = [event.rows for event in run.events if event.step == "locks"]
    assert both == [{"session": "s1", "mode": "ShareLock", "granted": "t"},
                    {"session": "s2", "mode": "ShareLock", "granted": "t"}]
    assert queued == both + [{"session": "split", "mode": "ExclusiveLock", "granted": "f"}]
    split = next(event for event in run.events if event.step == "split_exclusive")
    assert [event.step for event in run.events if event.waiting_s is not None] == ["split_exclusive"]
    assert split.lock["locktype"] == "advisory" and split.lock["mode"] == "ExclusiveLock" and split.lock["what"] == "0,1"
    assert sorted(split.lock["held_by"]) == ["s1", "s2"] and split.released_by == "s2_release"
    lines = outcome.text.splitlines()
    assert "step split_exclusive: select pg_advisory_lock(1); <waiting ...>" in lines
    assert lines.index("step s2_release: select pg_advisory_unlock_shared(1);") < \
        lines.index("step split_exclusive: <... completed>")


def test_exercise_5_a_shared_request_queues_behind_the_waiting_exclusive_one(lock_lab):
    """README's answer to exercise 5: a request that conflicts with a waiter's joins the queue (lock.c)."""
    spec = steps_spec(NOTEBOOK, "lock-steps").replace("session look", """session s3
step s3_share { select pg_advisory_lock_shared(1); }
step s3_release { select pg_advisory_unlock_shared(1); }

session look""")
    (run,) = lock_lab.steps(spec, permutation="s1_share s2_share split_exclusive s3_share locks s1_release "
                                              "s2_release split_release s3_release").permutations
    s3 = next(event for event in run.events if event.step == "s3_share")
    assert s3.waiting_s is not None and s3.lock["mode"] == "ShareLock" and s3.lock["held_by"] == ["split"]
    assert s3.released_by == "split_release"
    (queued,) = [event.rows for event in run.events if event.step == "locks"]
    assert {row["session"]: row["granted"] for row in queued} == {"s1": "t", "s2": "t", "s3": "f", "split": "f"}


@pytest.mark.parametrize("arms", [ARMS, STANDIN], ids=["hash-btree", "stand-in"])
def test_a_verdict_on_runs_too_short_says_so(lab_runs, arms):
    """The profile's run lengths leave each run its steady seconds, or the lab's verdict says too short."""
    from labkit.verdict import MIN_STEADY_S, compare, steady_seconds

    groups = newest_repeats(lab_runs, arms)
    found = compare(list(groups[arms[0]]), list(groups[arms[1]]))
    shortest = min(steady_seconds(run) or 0 for run in in_order(groups))
    assert (found.outcome == "too short") == (shortest < MIN_STEADY_S), (found.outcome, shortest)
    assert found.basis != "repeats", found.basis  # judged as interleaved pairs, never as separate cells
