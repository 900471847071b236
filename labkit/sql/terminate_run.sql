-- Backends left by an interrupted pgbench run (found by the run's application_name).
select pid, pg_terminate_backend(pid) as terminated
from pg_stat_activity
where application_name = %(application_name)s
  and pid <> pg_backend_pid()
