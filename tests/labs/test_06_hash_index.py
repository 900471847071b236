"""Lab 06: hash and btree under the article's update load, from the records the notebook saved."""

import pytest

from labkit import records
from labkit.records import waits_frame

from .steps import python_cell, replay, steps_spec, tagged_steps

pytestmark = pytest.mark.integration


def newest_repeats(lab_runs, notebook: str, names: list[str]) -> dict[str, records.Repeats]:
    """The newest repeats of each name (running the lab first if its records are missing)."""
    lab_runs(notebook, names)
    groups = records.latest_groups(records.list_runs(notebook=notebook))
    return {name: groups[name] for name in names}


def test_both_runs_complete_without_failures(lab_runs):
    groups = newest_repeats(lab_runs, "06-hash-index", ["hash", "btree"])
    for name in ("hash", "btree"):
        assert len(groups[name]) == groups[name].last.repeats >= 2, name  # the key runs are repeated
        for run in groups[name]:
            assert run.clients == 32 and run.mode == "prepared", name
            assert run.failures == 0 and run.aborted_clients == 0 and not run.errors and run.transactions > 0, name
            assert run.extra["index_bytes_after"] > run.extra["index_bytes_before"] > 0, name


def test_each_repeat_starts_from_a_fresh_index(lab_runs):
    groups = newest_repeats(lab_runs, "06-hash-index", ["hash", "btree"])
    for name in ("hash", "btree"):
        befores = {run.extra["index_bytes_before"] for run in groups[name]}
        assert len(befores) == 1, (name, befores)  # the same data, rebuilt: the same size before each repeat
        for previous, run in zip(groups[name], groups[name][1:]):  # not the previous repeat's grown index
            smallest = min(row["index_mb"] for row in run.probes["index"]) * 2**20
            assert smallest < previous.extra["index_bytes_after"], name


def test_the_hash_index_stays_smaller_than_the_btree(lab_runs):
    runs = lab_runs("06-hash-index", ["hash", "btree"])
    assert runs["hash"].extra["index_bytes_before"] < runs["btree"].extra["index_bytes_before"]
    assert runs["hash"].extra["index_bytes_after"] < runs["btree"].extra["index_bytes_after"]


def test_neither_index_takes_a_heavyweight_page_lock(lab_runs):
    """Since PostgreSQL 10 a hash index coordinates with buffer locks only: pg_locks, sampled during the run, agrees."""
    groups = newest_repeats(lab_runs, "06-hash-index", ["hash", "btree"])
    for name in ("hash", "btree"):
        for run in groups[name]:
            assert run.extra["lock_samples"] >= 2 * run.duration_s - 2, name  # the probe did sample the run
            assert run.extra["index_page_locks_max"] == 0, name


def test_the_stand_in_queues_on_the_lock_manager_and_the_control_does_not(lab_runs):
    runs = lab_runs("06-hash-index", ["shared-lock", "own-key", "no-lock"])
    assert "'own'" in runs["own-key"].scripts[0]["text"] and runs["own-key"].failures == 0
    waits = waits_frame([runs["shared-lock"], runs["no-lock"]])
    manager = waits.loc["LWLock: LockManager"] if "LWLock: LockManager" in waits.index else {"shared-lock": 0, "no-lock": 0}
    assert manager["shared-lock"] > 0 and manager["no-lock"] == 0, waits


def test_each_run_records_what_one_update_cost_the_server(lab_runs):
    """The notebook's PER_UPDATE check (pg_stat_statements, reset at each rebuild), noted in every repeat."""
    groups = newest_repeats(lab_runs, "06-hash-index", ["hash", "btree"])
    for name in ("hash", "btree"):
        for run in groups[name]:
            e = run.extra
            # every transaction's update was counted, and only this run's (reset before it)
            assert run.transactions <= e["updates_counted"] <= run.transactions + run.clients, (name, e)
            # a heap record and an entry in each of the two indexes: three records at least per update
            assert 3 <= float(e["wal_records_per_update"]) < 6, (name, e)
            assert float(e["wal_bytes_per_update"]) > 100 and float(e["server_us_per_update"]) > 0, (name, e)
            assert float(e["buffers_per_update"]) >= 4, (name, e)  # the row's index lookup, heap pages, two indexes


def test_every_hash_insertion_counts_itself_on_the_metapage(fresh_lab):
    lab = fresh_lab("test-06-metapage")
    lab.sql("""create extension if not exists pageinspect;
               create table hash_idx_test (id int primary key, info text);
               insert into hash_idx_test select g, md5(g::text) from generate_series(1, 1000) g;
               create index idx_1 on hash_idx_test using hash (info)""")
    replay(lab, tagged_steps("06-hash-index", "metapage"))
    namespace = {"lab": lab}
    exec(python_cell("06-hash-index", "metapage-python"), namespace)
    assert namespace["after"] == namespace["before"] + 1 == 1001
    (blocks,) = namespace["wal"].loc[namespace["wal"].record_type == "INSERT", "blocks"]
    assert blocks == "blkref #0: blk " + blocks.split()[3] + " blkref #1: blk 0", blocks  # a bucket page, then the metapage


@pytest.fixture(scope="module")
def lock_lab(fresh_lab):
    return fresh_lab("test-06-lock-steps")


def test_the_lock_steps_grant_both_shared_locks_and_make_the_exclusive_one_wait_for_them(lock_lab):
    spec = steps_spec("06-hash-index", "lock-steps")
    (standin,) = tagged_steps("06-hash-index", "standin")  # the runs under load take the same lock, on the same key
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
    spec = steps_spec("06-hash-index", "lock-steps").replace("session look", """session s3
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
