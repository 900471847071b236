"""Record the runs tests/unit/test_recorded_verdicts.py judges: real runs of a real server, saved as JSON here.

    python tests/data/runs/record.py [short] [size] [idle]   # all three by default; a minute; a home of its own

- ``short-*``: two arms of 2 s runs, interleaved: one steady second each (the verdict must say "too short").
- ``size-*``: two arms of a cost (the table's size after each run); the ``vacuumed`` arm's table is
  autovacuumed during one of its repeats (autovacuum woken every second, the table's threshold low),
  which that run's ``extra.events`` counts.
- ``idle-*``: one client that mostly sleeps, beside one busy process in a session of its own: other
  processes use a core while the other core stays idle (the CPU clause must name nobody).
"""

from __future__ import annotations

import json
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


def main(parts: list[str]) -> None:
    import labkit

    with private_home():
        lab = labkit.start("recorded", profile="ci")
        if "short" in parts:
            short(lab)
        if "size" in parts:
            size(lab)
        if "idle" in parts:
            idle(lab)
        lab.close()


def short(lab) -> None:
    lab.sql("drop table if exists t; create table t (id int primary key, n int); insert into t values (1, 0)")
    short = lab.experiment({"short-a": "select 1;", "short-b": "select n from t;"}, repeats=2, clients=1,
                           duration=2)
    save(short.runs(), "short")


def size(lab) -> None:
    lab.set(autovacuum_naptime="1s")
    lab.sql("""drop table if exists growing;
               create table growing (id int primary key, n int);
               create index on growing (n);  -- every update sets n: none is HOT, the table grows
               alter table growing set (autovacuum_vacuum_threshold = 50, autovacuum_vacuum_scale_factor = 0);""")

    def refill(lab, arm):  # each run starts from the same 100 rows; autovacuum is on in the vacuumed arm only
        lab.sql(f"alter table growing set (autovacuum_enabled = {'on' if arm == 'size-vacuumed' else 'off'})")
        lab.sql("truncate growing; insert into growing select g, 0 from generate_series(1, 100) g")

    def measure(lab, run):
        lab.check("select pg_relation_size('growing') as table_bytes", run)

    update = "\\set id random(1, 100)\nupdate growing set n = n + 1 where id = :id;"
    sizes = lab.experiment({"size-kept": update, "size-vacuumed": update}, metric="table_bytes", repeats=2,
                           clients=1, duration=5, options="-R 400", setup=refill, after=measure)
    save(sizes.runs(), "size")


def idle(lab) -> None:
    for _ in range(5):  # until the machine had a core to spare (something else may be running here)
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        try:
            time.sleep(1)
            idle = lab.pgbench("select pg_sleep(0.01);", name="idle-cores", clients=1, duration=4, live=False)
        finally:
            busy.kill()
            busy.wait()
        if idle.extra["cpu"]["idle"] >= 0.5:
            break
    save([idle], "idle")


if __name__ == "__main__":
    main(sys.argv[1:] or ["short", "size", "idle"])
