"""Lab 06: hash and btree under the article's update load, from the records the notebook saved."""

import pytest

from labkit.records import waits_frame

from .steps import python_cell, replay, tagged_steps

pytestmark = pytest.mark.integration


def test_both_runs_complete_without_failures(lab_runs):
    runs = lab_runs("06-hash-index", ["hash", "btree"])
    for name in ("hash", "btree"):
        run = runs[name]
        assert run.clients == 32 and run.mode == "prepared", name
        assert run.failures == 0 and run.aborted_clients == 0 and not run.errors and run.transactions > 0, name
        assert run.extra["index_bytes_after"] > run.extra["index_bytes_before"] > 0, name


def test_the_hash_index_stays_smaller_than_the_btree(lab_runs):
    runs = lab_runs("06-hash-index", ["hash", "btree"])
    assert runs["hash"].extra["index_bytes_before"] < runs["btree"].extra["index_bytes_before"]
    assert runs["hash"].extra["index_bytes_after"] < runs["btree"].extra["index_bytes_after"]


def test_neither_index_takes_a_heavyweight_page_lock(lab_runs):
    """Since PostgreSQL 10 a hash index coordinates with buffer locks only: pg_locks, sampled during the run, agrees."""
    runs = lab_runs("06-hash-index", ["hash", "btree"])
    for name in ("hash", "btree"):
        run = runs[name]
        assert run.extra["lock_samples"] >= 2 * run.duration_s - 2, name  # the probe did sample the run
        assert run.extra["index_page_locks_max"] == 0, name


def test_the_stand_in_queues_on_the_lock_manager_and_the_control_does_not(lab_runs):
    runs = lab_runs("06-hash-index", ["shared-lock", "no-lock"])
    waits = waits_frame([runs["shared-lock"], runs["no-lock"]])
    manager = waits.loc["LWLock: LockManager"] if "LWLock: LockManager" in waits.index else {"shared-lock": 0, "no-lock": 0}
    assert manager["shared-lock"] > 0 and manager["no-lock"] == 0, waits


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
