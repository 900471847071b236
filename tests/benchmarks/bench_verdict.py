"""Each lab's key comparison, effect against spread, under the profiles and machines students have (prints; asserts nothing).

    python tests/benchmarks/bench_verdict.py [--labs 02-flash-sale ...] [--configs ci-1cpu ci-2cpu laptop-2cpu]

Each configuration executes the labs headless (``python -m labkit execute``) in a server home
and results folder of its own, so that the server, its backends and pgbench start under that
configuration's CPUs (``taskset``: Binder's one CPU is ``ci-1cpu``). The labs repeat their key
runs (``P.repeats``); this reads the records they saved and prints, for each key comparison,
the verdict labkit computes (:func:`labkit.verdict.compare`): the ratio, its run-to-run range,
whether it stands beyond it, and what held the runs back. Linux only (taskset); run it alone on
the machine, as anything else running is part of what it measures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {  # name: (profile, CPUs pinned with taskset, or None for all)
    "ci-1cpu": ("ci", "0"),
    "ci-2cpu": ("ci", None),
    "laptop-2cpu": ("laptop", None),
}
# Each lab's key comparisons: (notebook, baseline run name, compared run name, metric, sweep). A sweep's names
# carry the clients ("bulk-cache1-c{clients}"): the point with the most clients both methods ran is compared.
KEY = [
    ("00-start-here", "same-row", "spread", "tps", None),
    ("01-gin-pending-list", "fastupdate-off", "off-open-xid", "non_hot_share", None),
    ("01-gin-pending-list", "fastupdate-off", "pending-64kB", "non_hot_share", None),
    ("02-flash-sale", "plain", "skip-locked", "goodput", None),
    ("02-flash-sale", "plain", "advisory", "goodput", None),
    ("03-queue", "for-update", "skip-locked", "goodput", None),
    ("03-queue", "for-update", "advisory", "goodput", None),
    ("04-hot-updates", "expression-index", "generated-column", "tps", None),
    ("04-hot-updates", "expression-index", "generated-column", "wal_bytes_per_update", None),
    ("05-sequence-cache", "bulk-cache1-c{clients}", "bulk-cache100-c{clients}", "tps", "most"),
    ("06-hash-index", "btree", "hash", "tps", None),
]


def execute(config: str, labs: list[str]) -> tuple[Path, dict[str, float]]:
    """Execute ``labs`` under ``config`` in a home of its own; the results folder and each lab's seconds."""
    profile, cpus = CONFIGS[config]
    home = Path(tempfile.mkdtemp(prefix=f"labkit-bench-{config}-"))
    results = Path(tempfile.mkdtemp(prefix=f"labkit-bench-results-{config}-"))
    executed = Path(tempfile.mkdtemp(prefix="labkit-bench-executed-"))
    env = {**os.environ, "LABKIT_HOME": str(home), "LABKIT_RESULTS": str(results), "LABKIT_PROFILE": profile,
           "LABKIT_IDLE_STOP": "60"}
    pin = ["taskset", "-c", cpus] if cpus else []
    seconds = {}
    try:
        for lab in labs:
            started = time.monotonic()
            done = subprocess.run([*pin, sys.executable, "-m", "labkit", "execute", str(ROOT / "notebooks" / f"{lab}.ipynb"),
                                   "--profile", profile, "--output", str(executed), "--no-html"],
                                  env=env, cwd=ROOT, capture_output=True, text=True)
            seconds[lab] = round(time.monotonic() - started)
            if done.returncode != 0:
                print(f"  {config} {lab}: failed after {seconds[lab]} s: {(done.stdout + done.stderr).strip()[-400:]}")
    finally:
        subprocess.run([sys.executable, "-c", "from labkit.embedded import EmbeddedServer; "
                        "EmbeddedServer().stop(mode='immediate')"], env=env, check=False, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(executed, ignore_errors=True)
    return results, seconds


def verdicts(results: Path, labs: list[str]) -> list[dict]:
    """The verdict of each key comparison from the records in ``results``."""
    from labkit import records, verdict

    rows = []
    for notebook, a, b, metric, sweep_point in KEY:
        if notebook not in labs:
            continue
        runs = records.list_runs(results, notebook=notebook)
        if sweep_point:  # a sweep: the point with the most clients both methods ran
            names = {r.name for r in runs}
            both = [c for c in sorted({r.clients for r in runs}, reverse=True)
                    if a.format(clients=c) in names and b.format(clients=c) in names]
            a, b = (a.format(clients=both[0]), b.format(clients=both[0])) if both else (a, b)
        groups = records.latest_groups(runs)
        if a not in groups or b not in groups:
            rows.append({"lab": notebook, "comparison": f"{b} / {a}", "verdict": "no records"})
            continue
        found = verdict.compare(groups[a], groups[b], metric=metric)
        rows.append({"lab": notebook, "comparison": f"{b} / {a} ({metric})", "ratio": found.ratio,
                     "range": f"{found.low:.2f}–{found.high:.2f}" if found.low and found.high else "",
                     "runs": f"{len(found.a_values)}+{len(found.b_values)}",
                     "verdict": "stands" if found.stands else "within noise",
                     "held back by": "; ".join(found.limits) or "—"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--labs", nargs="*", default=sorted({lab for lab, *_ in KEY}))
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
    args = parser.parse_args()
    if shutil.which("taskset") is None:
        sys.exit("taskset (util-linux) is needed to pin a configuration to one CPU.")
    import pandas as pd

    for config in args.configs:
        print(f"== {config}", flush=True)
        results, seconds = execute(config, args.labs)
        try:
            frame = pd.DataFrame(verdicts(results, args.labs))
        finally:
            shutil.rmtree(results, ignore_errors=True)
        print("lab seconds: " + ", ".join(f"{lab} {s}" for lab, s in seconds.items()))
        with pd.option_context("display.max_colwidth", 200, "display.width", 250):
            print(frame.to_string(index=False), flush=True)
        print(markdown(frame), flush=True)


def markdown(frame) -> str:
    """The table as Markdown, for notebooks/README.md."""
    columns = list(frame.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("" if value is None else str(value) for value in row) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
