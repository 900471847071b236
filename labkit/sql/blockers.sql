-- Who blocks whom: each waiting backend with the pids that block it and what it waits on.
select a.pid,
       a.application_name,
       a.wait_event_type,
       a.wait_event,
       pg_blocking_pids(a.pid) as blocked_by,
       left(a.query, 120) as query
from pg_stat_activity a
where a.datname = current_database()
  and cardinality(pg_blocking_pids(a.pid)) > 0
order by a.pid
