"""Verdicts on real run records (tests/data/runs, made by its record.py against a real server)."""

import json
from pathlib import Path

from labkit import verdict
from labkit.records import Run

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"


def recorded(prefix: str) -> dict[str, list[Run]]:
    """The recorded runs of one experiment, by arm, in the order they ran."""
    found: dict[str, list[Run]] = {}
    for path in sorted(RUNS.glob(f"{prefix}-*.json")):
        run = Run.from_dict(json.loads(path.read_text(encoding="utf-8")))
        found.setdefault(run.name, []).append(run)
    return {name: sorted(runs, key=lambda run: run.order or 0) for name, runs in found.items()}


def test_runs_of_one_steady_second_are_too_short_to_tell():
    arms = recorded("short")
    assert all(run.phases["steady_s"] <= 1.0 for runs in arms.values() for run in runs)
    found = verdict.compare(arms["short-a"], arms["short-b"])
    assert found.basis == "too short" and found.stands is False
    assert "steady second: too short to tell" in found.sentence and "beyond" not in found.sentence


def test_a_size_whose_repeats_differ_by_autovacuum_visits_is_judged_per_repeat_with_the_visits_named():
    arms = recorded("size")
    visited = [run for run in arms["size-vacuumed"] if run.extra["events"]["autovacuum"]]
    assert visited, "the recording must have an autovacuum visit in the vacuumed arm: run record.py again"
    assert not any(run.extra["events"]["autovacuum"] for run in arms["size-kept"])
    found = verdict.compare(arms["size-kept"], arms["size-vacuumed"], metric="table_bytes")
    assert found.kind == "cost" and found.basis == "per repeat" and found.limits == []
    named = {key for key, said in found.events.items() if "autovacuum visit" in said}
    assert named == {f"size-vacuumed {arms['size-vacuumed'].index(run) + 1}" for run in visited}
    assert all(key in found.sentence for key in named) and "CPU" not in found.sentence


def test_with_idle_cores_the_cpu_clause_names_no_other_processes():
    (run,) = recorded("idle")["idle-cores"]
    cpu = run.extra["cpu"]
    assert cpu["idle"] >= 0.5 and cpu["cpus"] - cpu["idle"] - cpu["pgbench"] - cpu["backends"] >= 0.5  # the busy loop
    assert not any("other processes" in said for said in verdict.limits(run))
