"""Lab 04: HOT updates with the expression index, without it, and with a stored generated column."""

import pytest

pytestmark = pytest.mark.integration

RUNS = ["expression-index", "no-expression-index", "generated-column"]


def test_every_run_completes_and_records_its_figures(lab_runs):
    runs = lab_runs("04-hot-updates", RUNS)
    for name in RUNS:
        run = runs[name]
        assert run.clients == 6 and run.failures == 0 and not run.errors, name
        assert {"hot_ratio", "newpage_updates", "table_bytes", "index_bytes", "updates"} <= set(run.extra), name
        assert run.extra["updates"] >= 2 * run.transactions - 2 * run.clients, name  # two updates per transaction
        assert run.probes.get("sizes"), name


def test_the_expression_index_blocks_hot_and_a_generated_column_does_not(lab_runs):
    runs = lab_runs("04-hot-updates", RUNS)
    assert runs["expression-index"].extra["hot_ratio"] < 0.1
    assert runs["no-expression-index"].extra["hot_ratio"] > 0.9
    assert runs["generated-column"].extra["hot_ratio"] > 0.9  # the first name is indexed, and unchanged
    assert runs["generated-column"].extra["prenom_index_bytes"] > 0
    assert runs["no-expression-index"].extra["prenom_index_bytes"] is None  # there is no such index


def test_the_table_grows_far_more_with_the_expression_index(lab_runs):
    runs = lab_runs("04-hot-updates", RUNS)
    with_index = runs["expression-index"]
    for name in ("no-expression-index", "generated-column"):
        assert with_index.extra["table_bytes"] > 5 * runs[name].extra["table_bytes"], name
        assert with_index.extra["index_bytes"] > 5 * runs[name].extra["index_bytes"], name
    # non-HOT versions that did not fit went to other pages; HOT ones stay on theirs
    assert with_index.extra["newpage_updates"] > runs["generated-column"].extra["newpage_updates"]
