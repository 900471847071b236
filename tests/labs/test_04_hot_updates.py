"""Lab 04: HOT updates, from the records the notebook saved; pruning held back by a snapshot, from its steps."""

import pytest

from labkit import records
from labkit.experiment import plan
from labkit.profiles import Profile
from labkit.verdict import MIN_STEADY_S, compare, pairs, steady_pairs, steady_seconds

from .steps import replay, steps_spec, tagged_steps

pytestmark = pytest.mark.integration

NOTEBOOK = "04-hot-updates"
ARMS = ["expression-index", "generated-column", "no-expression-index"]  # the experiment's arms, the baseline first
COSTS = ["wal_bytes_per_update", "table_pages", "prenom_index_pages"]  # judged per repeat; buffers are not judged
FIGURES = {"updates", "hot_updates", "hot_ratio", "newpage_updates", "table_bytes", "prenom_index_bytes",
           "c2_index_bytes", "page0_line_pointers", "page0_free_bytes", "c2_leaf_pages", "c2_row_pointers",
           "c2_dead_items", "prenom_leaf_pages", "prenom_row_pointers", "prenom_posting_lists", "plan_at_end",
           "events", "buffers_per_update", "table_bytes_per_update", "prenom_index_bytes_per_update", *COSTS}
MAX_LINE_POINTERS = 291  # MaxHeapTuplesPerPage with 8 kB pages


def experiment(lab_runs) -> dict[str, records.Repeats]:
    """The newest experiment's runs, by arm."""
    lab_runs(NOTEBOOK, ARMS)
    groups = records.latest_groups(records.list_runs(notebook=NOTEBOOK))
    return {name: groups[name] for name in ARMS}


def unvacuumed(run) -> bool:
    """No VACUUM visited the table during the run (one after it is measured too late to matter)."""
    return run.extra["events"].get("autovacuum", 0) == 0


def test_the_arms_ran_interleaved_each_on_a_fresh_table(lab_runs):
    arms = experiment(lab_runs)
    runs = sorted((run for group in arms.values() for run in group), key=lambda run: run.order)
    rounds = len(runs) // len(ARMS)  # the profile's repeats, or more where a budget added rounds (laptop)
    assert rounds >= Profile.named(runs[0].profile).repeats
    assert len({run.experiment for run in runs}) == 1 and [run.order for run in runs] == list(range(1, len(runs) + 1))
    assert [run.name for run in runs] == plan(ARMS, rounds)  # A B, B A, ...
    for run in runs:
        assert run.clients == 6 and run.failures == 0 and not run.errors, run.name
        assert FIGURES <= set(run.extra), f"{run.name} lacks {FIGURES - set(run.extra)}"
        # a fresh table each run: its counter holds this run's updates alone, two a transaction
        assert 2 * run.whole["transactions"] - 2 * run.clients <= run.extra["updates"] <= 2 * run.whole["transactions"]
        assert run.probes.get("sizes"), run.name


def test_the_expression_index_blocks_hot_and_the_generated_column_keeps_it(lab_runs):
    arms = experiment(lab_runs)
    for run in arms["expression-index"]:
        # only an update whose random value repeats the old one (about 1 in 100,000) leaves c1 unchanged
        assert run.extra["hot_ratio"] < 0.01, run.extra["hot_ratio"]
        if unvacuumed(run):  # no executor hint for an index that reads c1: every version keeps its pointer
            assert run.extra["prenom_row_pointers"] >= run.extra["updates"] - run.extra["hot_updates"]
            assert run.extra["prenom_posting_lists"] > 0
    for run in arms["generated-column"]:
        assert run.extra["hot_ratio"] > 0.9, run.extra["hot_ratio"]  # the first name is indexed, and unchanged
        assert run.extra["prenom_row_pointers"] < run.extra["updates"] / 10
    for run in arms["no-expression-index"]:  # the control: no index reads c1
        assert run.extra["hot_ratio"] > 0.9 and run.extra["prenom_index_bytes"] is None, run.extra


def test_the_c2_index_stays_small_without_any_entry_marked_dead_under_a_bitmap_scan(lab_runs):
    for run in [run for group in experiment(lab_runs).values() for run in group]:
        e = run.extra
        # c2 is never set: its index gets the hint, and bottom-up deletion keeps it to a leaf page or two. How
        # many entries stay depends on how many versions the clients' snapshots still see (more on a busy
        # machine), so the bound is loose: most of the versions' entries are gone
        versions = e["updates"] - e["hot_updates"] + 2
        assert e["c2_leaf_pages"] <= 2, (run.name, e["c2_leaf_pages"], versions)
        if run.name == "expression-index":  # every update is a version with an entry in t5_c2_idx
            assert e["c2_row_pointers"] < versions / 2, (run.name, e["c2_row_pointers"], versions)
        if e["plan_at_end"] == "Bitmap Heap Scan" and e["events"].get("autoanalyze", 0) == 0:
            assert e["c2_dead_items"] == 0  # the plan did not change during the run, and a bitmap scan marks none


def test_without_vacuum_a_table_whose_updates_are_not_hot_takes_a_page_per_291_versions(lab_runs):
    for run in experiment(lab_runs)["expression-index"]:
        if unvacuumed(run):
            versions = run.extra["updates"] - run.extra["hot_updates"] + 2  # and the two rows' first versions
            assert run.extra["table_bytes"] // 8192 >= versions / MAX_LINE_POINTERS, run.extra


def test_the_costs_are_judged_per_repeat_and_the_tps_verdict_says_when_its_runs_are_too_short(lab_runs):
    arms = experiment(lab_runs)
    a, b = arms["expression-index"], arms["generated-column"]
    for metric in COSTS:
        verdict = compare(a, b, metric=metric)
        assert verdict.kind == "cost" and verdict.basis == "per repeat" and verdict.ratio is not None, metric
    # a non-HOT update writes the version and an entry into each of two indexes; a HOT one the version only
    assert min(run.extra["wal_bytes_per_update"] for run in a) > max(run.extra["wal_bytes_per_update"] for run in b)
    tps = compare(a, b, metric="tps")
    shortest = min(steady_seconds(run) for run in a + b)
    kept, changed = steady_pairs(pairs(a, b))
    if shortest < MIN_STEADY_S:
        assert tps.basis == "too short" and "too short to tell" in tps.sentence, (shortest, tps.sentence)
    elif len(kept) < 2:  # the machine's load changed within a pair: it says it cannot tell, and why
        assert tps.basis == "load changed" and not tps.stands, tps.sentence
    else:
        assert tps.basis == "pairs" and (f"{len(changed)} more left out" in tps.sentence) == bool(changed), tps.sentence


def rows_of(run, step: str) -> list[list[dict]]:
    return [event.rows for event in run.events if event.step == step]


def test_a_snapshot_holds_pruning_back_until_it_ends_then_the_chain_becomes_a_redirect(fresh_lab):
    lab = fresh_lab("test-04-steps")
    (run,) = lab.steps(steps_spec(NOTEBOOK, "prune-steps")).permutations
    assert all(event.waiting_s is None and event.error is None for event in run.events)  # pruning never waits
    updates = [rows[0]["ctid"] for rows in rows_of(run, "t2_update1") + rows_of(run, "t2_update2")]
    # row 1 twice (HOT, room left), then the third version in the room pruning made; row 2 to page 1 meanwhile
    assert updates == ["(0,3)", "(0,4)", "(0,3)", "(1,1)"]
    held, pruned, last = rows_of(run, "t2_page")
    assert {row["lp"]: (row["line_pointer"], row["t_ctid"]) for row in held} == {
        "1": ("normal", "(0,3)"), "2": ("normal", "(1,1)"), "3": ("normal", "(0,4)"), "4": ("normal", "(0,4)")}
    assert int(held[0]["free_bytes"]) < 8192 // 10  # too little room, but the horizon test stopped pruning first
    (snapshots,) = rows_of(run, "t2_snapshots")
    t1 = next(row for row in snapshots if row["session"] == "T1")
    assert t1["backend_xid"] in ("", None) and int(t1["backend_xmin"]) <= min(int(row["t_xmax"]) for row in held[:3])
    assert rows_of(run, "t1_read") == [[{"id": "1", "n": "0"}, {"id": "2", "n": "0"}]]  # T1 still reads the old ones
    assert [row["line_pointer"] for row in pruned] == ["redirect to 4", "dead", "unused", "normal"]
    assert int(pruned[0]["free_bytes"]) > int(held[0]["free_bytes"]) + 4000
    assert [row["hot"] for row in last][2:] == ["heap-only", "HOT-updated heap-only"]


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
    # a fixed amount of work (not a duration: how much a busy machine does in 3 s varies): 12,000 updates
    run = lab.pgbench(ARTICLE_SCRIPT, name="postings", clients=6, transactions=1000, probes=[])
    updates = 2 * run.transactions
    assert updates == 12000, run.transactions
    *_, outcome = replay(lab, tagged_steps(NOTEBOOK, "measure-sql") + tagged_steps(NOTEBOOK, "postings"))
    rows = outcome.frame.set_index("index")
    expression, c2 = rows.loc["t5_expr_idx"], rows.loc["t5_c2_idx"]
    # no bottom-up deletion for the expression index (c1 changes): one pointer per version, most in posting lists
    # (an update whose random value repeats the old one, about 1 in 100,000, can be HOT and add none)
    assert expression.row_pointers >= updates - updates // 1000 and expression.posting_lists > 0
    assert expression.row_pointers > 10 * expression["items"]
    # bottom-up deletion keeps the c2 index to a page or two: more than 5,000 pointers need at least four leaf
    # pages even packed in posting lists (about 1,350 six-byte pointers a page). How many stay follows the
    # snapshots still open when a page fills (more on a busy machine): most are gone
    assert c2.leaf_pages <= 2 and c2.row_pointers < updates / 2, (c2.leaf_pages, c2.row_pointers, updates)
