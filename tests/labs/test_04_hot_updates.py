"""Lab 04: HOT updates with the expression index, without it, and with a stored generated column."""

import pytest

from labkit import records

from .steps import replay, tagged_steps

pytestmark = pytest.mark.integration

RUNS = ["expression-index", "no-expression-index", "generated-column"]


def newest_repeats(lab_runs, notebook: str, names: list[str]) -> dict[str, records.Repeats]:
    """The newest repeats of each name (running the lab first if its records are missing)."""
    lab_runs(notebook, names)
    groups = records.latest_groups(records.list_runs(notebook=notebook))
    return {name: groups[name] for name in names}


def test_every_run_completes_and_records_its_figures(lab_runs):
    groups = newest_repeats(lab_runs, "04-hot-updates", RUNS)
    for name in RUNS:
        assert len(groups[name]) == groups[name].last.repeats >= 2, name  # the key runs are repeated
        for run in groups[name]:
            assert run.clients == 6 and run.failures == 0 and not run.errors, name
            assert {"hot_ratio", "newpage_updates", "table_bytes", "index_bytes", "updates"} <= set(run.extra), name
            assert run.extra["updates"] >= 2 * run.transactions - 2 * run.clients, name  # two updates per transaction
            assert run.probes.get("sizes"), name


def test_each_repeat_runs_on_a_fresh_table(lab_runs):
    groups = newest_repeats(lab_runs, "04-hot-updates", RUNS)
    for name in RUNS:
        for run in groups[name]:  # hot_check() counts this repeat's updates only: the table was new
            assert run.extra["updates"] <= 2 * run.transactions + 2 * run.clients, name


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


def test_page_0_fills_with_the_versions_pointers_and_when_full_has_bytes_to_spare(lab_runs):
    """The notebook's own check after the expression-index runs: the page-search demonstration."""
    run = lab_runs("04-hot-updates", RUNS)["expression-index"]
    e = run.extra
    assert {"page0_line_pointers", "page0_free_bytes", "version_bytes", "vacuums_running", "vacuums_done"} <= set(e)
    if e["vacuums_done"] == 0 and e["vacuums_running"] == 0:
        # Non-HOT updates leave a pointer behind each (dead until VACUUM): page 0 kept taking versions until its
        # bytes ran out at least once, a version and its pointer each (aligned to 8), before one went elsewhere;
        # its two rows' pointers alone, or HOT updates reusing theirs, stay far below that.
        assert e["page0_line_pointers"] >= (8192 - 24) // (e["version_bytes"] + 8 + 4), e
    # Whether page 0 runs out of pointers is a race (a version leaves the page when an update finds
    # too few free bytes before pruning made room); when it did and no VACUUM freed any since,
    # bytes are left that no new version can use.
    if e["page0_line_pointers"] == 291 and e["vacuums_done"] == 0 and e["vacuums_running"] == 0:
        assert e["page0_free_bytes"] > e["version_bytes"] + 4 > 4


ARTICLE_SCRIPT = """\\set id random(1, 100000)
\\set id2 random(1, 100000)
update t5 set c1 = '{"valeur": ":id", "prenom": "guillaume"}' where c2 = 2;
update t5 set c1 = '{"valeur": ":id2", "prenom": "adrien"}' where c2 = 1;
"""


def test_the_expression_index_keeps_every_pointer_in_posting_lists_and_the_c2_index_stays_small(fresh_lab):
    lab = fresh_lab("test-04-postings")
    lab.sql("""create extension if not exists pageinspect;
               create table t5 (c1 jsonb, c2 int, c3 int);
               create index t5_c2_idx on t5 (c2);
               create index t5_expr_idx on t5 ((c1->>'prenom'));
               -- a visit of autovacuum would remove the dead versions' pointers: this test counts them
               alter table t5 set (autovacuum_enabled = off);
               insert into t5 values ('{"prenom": "adrien", "valeur": "1"}', 1, 1),
                                     ('{"prenom": "guillaume", "valeur": "2"}', 2, 2)""")
    run = lab.pgbench(ARTICLE_SCRIPT, name="postings", clients=6, duration=3, probes=[])
    updates = 2 * run.transactions
    assert updates > 5000, run.transactions
    (outcome,) = replay(lab, tagged_steps("04-hot-updates", "postings"))
    rows = outcome.frame.set_index("index")
    expression, c2 = rows.loc["t5_expr_idx"], rows.loc["t5_c2_idx"]
    # no bottom-up deletion for the expression index (c1 changes): one pointer per version, most in posting lists
    # (an update whose random value repeats the old one, about 1 in 100,000, can be HOT and add none)
    assert expression.row_pointers >= updates - updates // 1000 and expression.posting_lists > 0
    assert expression.row_pointers > 10 * expression["items"]
    # bottom-up deletion keeps the c2 index to a page, far from one entry per update
    assert c2.leaf_pages <= 2 and c2.row_pointers < updates / 10
