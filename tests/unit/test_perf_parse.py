"""labkit.perf's parsers against recorded real perf 6.1 output (perf record -e cpu-clock --call-graph dwarf
of two backends running a plpgsql nextval loop), and its fallback when perf cannot record."""

from pathlib import Path

import pytest

from labkit import perf
from labkit.errors import UsageError
from labkit.records import Run

DATA = Path(__file__).resolve().parents[1] / "data" / "perf"


def test_self_report_rows():
    rows = perf.parse_report((DATA / "report-self.txt").read_text())
    assert rows[0] == {"symbol": "LWLockAttemptLock", "dso": "postgres", "kind": "user", "self": 17.54, "children": None}
    assert all(row["children"] is None and not row["symbol"].endswith("-") for row in rows)
    assert [row["self"] for row in rows] == sorted((row["self"] for row in rows), reverse=True)
    assert 60 < sum(row["self"] for row in rows) <= 100.01
    assert perf._sample_count((DATA / "report-self.txt").read_text()) == 781


def test_children_report_rows():
    rows = perf.parse_report((DATA / "report-children.txt").read_text())
    top = {row["symbol"]: row for row in rows}
    assert top["PostgresMain"]["children"] == 100.0 and top["PostgresMain"]["self"] == 0.0
    assert top["LWLockAttemptLock"]["self"] == 17.54
    assert top["LWLockAttemptLock"]["children"] >= top["LWLockAttemptLock"]["self"]
    assert any(row["dso"] == "plpgsql.so" for row in rows)


def test_a_caller_with_little_self_time_is_kept():
    rows = perf.parse_report((DATA / "report-children.txt").read_text())
    kept = perf.keep_top(rows, 60)  # what a recording keeps
    snapshot = next(row for row in kept if row["symbol"] == "GetSnapshotData")  # 1.02% self, 9.99% with callees
    assert snapshot["self"] == 1.02 and snapshot["children"] == 9.99
    assert [row["symbol"] for row in sorted(rows, key=lambda r: -r["self"])[:60]] == [row["symbol"] for row in kept[:60]]
    assert len(kept) > 60  # callers with little self time come after them
    run = Run("loop", "nb", "ci", "now", extra={"perf": {"available": True, "symbols": kept}})
    assert perf.share(run, "GetSnapshotData") == 1.02 and perf.share(run, "GetSnapshotData", inclusive=True) == 9.99


def test_folded_stacks_from_perf_script():
    folded = perf.fold_script((DATA / "script.txt").read_text())
    blocks = [block for block in (DATA / "script.txt").read_text().split("\n\n") if block.strip()]
    with_frames = [block for block in blocks if "\n\t" in block]
    assert sum(folded.values()) == len(with_frames) > 50
    assert any(stack.endswith(";LWLockAttemptLock") for stack in folded)
    assert all("PostgresMain" in stack for stack in list(folded)[:5])
    assert list(folded.values()) == sorted(folded.values(), reverse=True)
    assert len(perf.fold_script((DATA / "script.txt").read_text(), limit=3)) == 3


def _profiled(available=True):
    figures = {"available": False, "message": "perf is not installed (...)"}
    if available:
        figures = {"available": True, "call_graph": "dwarf", "samples": 10, "note": perf.CALL_GRAPH_NOTE,
                   "symbols": [{"symbol": "s_lock", "dso": "postgres", "kind": "user", "self": 27.5, "children": 27.7}],
                   "folded": {"main;PostgresMain;s_lock": 7, "main;PostgresMain;LWLockAcquire": 3}}
    return Run("bulk", "nb", "ci", "now", extra={"perf": figures})


def test_table_share_and_icicle():
    run = _profiled()
    assert perf.table(run).iloc[0]["symbol"] == "s_lock"
    assert perf.share(run, "s_lock") == 27.5 and perf.recorded(run)
    assert perf.share(run, "LWLockAcquire") is None  # below the report's cut-off: unknown, not a measured 0
    figure = perf.icicle(run)
    trace = figure.data[0]
    assert dict(zip(trace.ids, trace.values))["main;PostgresMain"] == 10
    assert dict(zip(trace.ids, trace.parents))["main;PostgresMain;s_lock"] == "main;PostgresMain"


def test_fallback_when_perf_is_absent():
    run = _profiled(available=False)
    assert perf.table(run).iloc[0]["perf"].startswith("perf is not installed")
    assert perf.share(run, "s_lock") is None
    assert "perf is not installed" in perf.icicle(run).layout.title.text
    with pytest.raises(UsageError, match="perf=True"):
        perf.table(Run("plain", "nb", "ci", "now"))
