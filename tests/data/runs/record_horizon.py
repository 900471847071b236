"""Record the runs tests/unit/test_recorded_horizon.py reads: the horizon probe of a real server where backends tie.

    python tests/data/runs/record_horizon.py      # a minute or two; a server home of its own, removed afterwards

Backends tie on the oldest xmin whenever their snapshots were taken while one transaction ran: its
xid is their xmin. Both runs sample labkit's ``horizon`` probe (every tied backend, one row each)
and, beside it, ``horizon-before``: the probe as lab 01 had it before (the oldest by age alone,
``limit 1``, so one of the tied backends at random), the pid in a column of its own.

- ``horizon-idle.json``: ``fastupdate = off`` and one idle session holding a transaction id: every
  client's snapshot ties with it.
- ``horizon-flush.json``: a 64 kB pending list that the clients flush themselves, on a table of few
  rows, so that clients queue for the flusher's row; runs are repeated until one has an instant where
  the flusher and a backend waiting for a lock tie by their snapshots, both taken while an earlier
  flush ran (at most eight tries).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from tests.benchmarks.private_home import private_home  # noqa: E402

BEFORE = """
select extract(epoch from clock_timestamp() - xact_start)::float8 as oldest_xact_s, pid::text as pid,
       coalesce(wait_event_type || ': ' || wait_event, 'on CPU') as doing, left(query, 45) as query
from pg_stat_activity
where datname = current_database() and coalesce(backend_xmin, backend_xid) is not null
  and pid <> pg_backend_pid()
  and application_name is distinct from 'labkit-probe'
  and (backend_type = 'client backend'
       or backend_type = 'autovacuum worker' and query not like 'autovacuum: VACUUM %')
order by greatest(age(backend_xmin), age(backend_xid)) desc limit 1"""
ROWS = 1000  # few enough that clients queue for the flusher's row
SCRIPT = f"\\set id random(1, {ROWS})\nupdate test set crt_time = now() where id = :id;"


def save(run, name: str) -> None:
    (HERE / f"{name}.json").write_text(json.dumps(run.to_dict(), indent=1, default=str) + "\n", encoding="utf-8")


def flusher_tied_with_waiters(run) -> bool:
    from labkit.probes import horizon_holders

    return any(holder["tied_in_lock_waits"] and holder["holds_by"] == "its snapshot"
               and not holder["doing"].startswith("Lock:") for holder in horizon_holders(run.probes.get("horizon") or []))


def main() -> None:
    import labkit
    from labkit.probes import HORIZON

    with private_home():
        lab = labkit.start("recorded", profile="ci")
        before = labkit.probe("horizon-before", BEFORE, 0.5)

        def build(gin: str) -> None:
            with lab.connect() as connection:
                connection.execute("drop table if exists test")
                connection.execute(f"""create table test with (autovacuum_enabled = off) as
                    select g as id, (select to_tsvector(string_agg(md5((g * 40 + i)::text), ' '))
                                     from generate_series(1, 40) i) as info, now()::timestamp as crt_time
                    from generate_series(1, {ROWS}) g""")
                connection.execute(f"create index on test using gin (info) with ({gin})")
                connection.execute("create index on test (id)")
                connection.execute("vacuum analyze test")

        build("fastupdate = off")
        idle = lab.session("idle")
        idle.run("begin; select pg_current_xact_id()")
        run = lab.pgbench(SCRIPT, name="horizon-idle", clients=16, duration=3, mode="prepared", live=False,
                          probes=[HORIZON, before], hold_sessions=True)
        idle.run("rollback")
        save(run, "horizon-idle")

        for _ in range(8):
            build("fastupdate = on, gin_pending_list_limit = 64")
            run = lab.pgbench(SCRIPT, name="horizon-flush", clients=16, duration=4, mode="prepared", live=False,
                              probes=[HORIZON, before])
            if flusher_tied_with_waiters(run):
                save(run, "horizon-flush")
                break
        else:
            raise SystemExit("no run had the flusher tied with a backend waiting for a lock: run it again")
        lab.close()


if __name__ == "__main__":
    shutil.os.environ.setdefault("LABKIT_PROFILE", "ci")
    main()
