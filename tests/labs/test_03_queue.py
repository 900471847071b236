"""Lab 03: every order accounted for, from the records the notebook saved."""

import pytest

pytestmark = pytest.mark.integration

METHODS = ["for-update", "skip-locked", "advisory", "advisory-fixed", "advisory-partitioned"]


def test_every_run_is_checked_and_nothing_is_duplicated(lab_runs):
    runs = lab_runs("03-queue", METHODS)
    orders = runs["for-update"].clients * runs["for-update"].transactions_per_client
    for name in METHODS:
        run = runs[name]
        assert run.mode == "extended" and run.failures == 0 and not run.errors, name
        assert run.transactions_per_client == runs["for-update"].transactions_per_client
        assert {"consumed", "left", "duplicates", "goodput"} <= set(run.extra), name
        assert run.extra["duplicates"] == 0, name
        assert run.extra["consumed"] == run.extra["distinct_orders"] == run.extra["work"], name
        assert run.extra["consumed"] + run.extra["left"] == orders, name


def test_for_update_and_the_fixed_script_consume_every_order(lab_runs):
    runs = lab_runs("03-queue", METHODS)
    for name in ("for-update", "advisory-fixed"):
        assert runs[name].extra["left"] == 0, name
        assert runs[name].extra["useful"] == 1.0, name


def test_the_article_advisory_script_leaves_orders_behind(lab_runs):
    advisory = lab_runs("03-queue", ["advisory"])["advisory"]
    assert advisory.extra["left"] > 0
    assert advisory.extra["goodput"] < advisory.tps


def test_partitions_beat_for_update_and_read_less(lab_runs):
    runs = lab_runs("03-queue", METHODS)
    assert runs["advisory-partitioned"].extra["goodput"] > runs["for-update"].extra["goodput"]
    assert runs["advisory-partitioned"].extra["index_reads_per_order"] < runs["for-update"].extra["index_reads_per_order"]
