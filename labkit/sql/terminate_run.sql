-- Backends of runs whose pgbench is gone (found by each run's application_name).
select pid, pg_terminate_backend(pid) as terminated
from pg_stat_activity
where application_name = any(%(names)s)
  and pid <> pg_backend_pid()
