"""Record the runs tests/unit/test_recorded_verdicts.py judges: real runs of a real server, saved as JSON here.

    python tests/data/runs/record.py      # about a minute; a server home of its own, removed afterwards

- ``short-*``: two arms of 2 s runs, interleaved: one steady second each (the verdict must say "too short").
- ``size-*``: two arms of a cost (the table's size after each run); the ``vacuumed`` arm's table is
  autovacuumed during one of its repeats (autovacuum woken every second, the table's threshold low),
  which that run's ``extra.events`` counts.
- ``idle-*``: one client that mostly sleeps, beside one busy process in a session of its own: other
  processes use a core while the other core stays idle (the CPU clause must name nobody).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from tests.benchmarks.private_home import private_home  # noqa: E402


def save(runs, prefix: str) -> None:
    for number, run in enumerate(runs, start=1):
        (HERE / f"{prefix}-{number}.json").write_text(json.dumps(run.to_dict(), indent=1, default=str) + "\n",
                                                      encoding="utf-8")


def main() -> None:
    import labkit

    with private_home():
        lab = labkit.start("recorded", profile="ci")
        lab.sql("drop table if exists t; create table t (id int primary key, n int); insert into t values (1, 0)")
        short = lab.experiment({"short-a": "select 1;", "short-b": "select n from t;"}, repeats=2, clients=1,
                               duration=2)
        save(short.runs(), "short")

        lab.set(autovacuum_naptime="1s")
        lab.sql("""drop table if exists kept, vacuumed;
                   create table kept (id int primary key, n int) with (autovacuum_enabled = off);
                   create table vacuumed (id int primary key, n int)
                     with (autovacuum_vacuum_threshold = 50, autovacuum_vacuum_scale_factor = 0);""")

        def refill(lab, arm):
            lab.sql(f"truncate {arm.split('-')[1]}; insert into {arm.split('-')[1]} select g, 0 from generate_series(1, 100) g")

        def size(lab, run):
            table = run.name.split("-")[1]
            lab.check(f"select pg_relation_size('{table}') as table_bytes", run)

        sizes = lab.experiment({"size-kept": "\\set id random(1, 100)\nupdate kept set n = n + 1 where id = :id;",
                                "size-vacuumed": "\\set id random(1, 100)\nupdate vacuumed set n = n + 1 where id = :id;"},
                               metric="table_bytes", repeats=2, clients=1, duration=4, setup=refill, after=size)
        save(sizes.runs(), "size")

        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        try:
            time.sleep(1)
            idle = lab.pgbench("select pg_sleep(0.01);", name="idle-cores", clients=1, duration=4, live=False)
        finally:
            busy.kill()
            busy.wait()
        save([idle], "idle")
        lab.close()


if __name__ == "__main__":
    shutil.os.environ.setdefault("LABKIT_PROFILE", "ci")
    main()
