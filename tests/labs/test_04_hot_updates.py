"""Lab 04: HOT updates with and without the expression index, from the records the notebook saved."""

import pytest

pytestmark = pytest.mark.integration

RUNS = ["expression-index", "no-expression-index", "expression-index-autovacuum-off",
        "no-expression-index-autovacuum-off"]


def test_every_run_completes_and_records_its_figures(lab_runs):
    runs = lab_runs("04-hot-updates", RUNS)
    for name in RUNS:
        run = runs[name]
        assert run.clients == 6 and run.failures == 0 and not run.errors, name
        assert {"hot_ratio", "table_bytes", "index_bytes", "updates"} <= set(run.extra), name
        assert run.extra["updates"] >= 2 * run.transactions - 2 * run.clients, name  # two updates per transaction
        assert run.probes.get("sizes"), name


def test_the_expression_index_blocks_hot(lab_runs):
    runs = lab_runs("04-hot-updates", RUNS)
    for suffix in ("", "-autovacuum-off"):
        assert runs["no-expression-index" + suffix].extra["hot_ratio"] > 0.9
        assert runs["expression-index" + suffix].extra["hot_ratio"] < 0.1


def test_the_table_grows_far_more_with_the_expression_index(lab_runs):
    runs = lab_runs("04-hot-updates", RUNS)
    for suffix in ("", "-autovacuum-off"):
        with_index, without = runs["expression-index" + suffix], runs["no-expression-index" + suffix]
        assert with_index.extra["table_bytes"] > 5 * without.extra["table_bytes"], suffix
        assert with_index.extra["index_bytes"] > 5 * without.extra["index_bytes"], suffix
