"""Lab 06: hash and btree under the article's update load, from the records the notebook saved."""

import pytest

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
