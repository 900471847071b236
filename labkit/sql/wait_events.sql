-- What every other backend of this database is doing right now, grouped by wait event.
-- "CPU" stands for an active backend that is not waiting (running or runnable).
select coalesce(wait_event_type || ': ' || wait_event, 'CPU') as wait,
       count(*)::int as backends
from pg_stat_activity
where datname = current_database()
  and backend_type = 'client backend'
  and state = 'active'
  and pid <> pg_backend_pid()
  and application_name is distinct from '{probe}'  -- labkit's probes (labkit.db.PROBE), and nothing else
group by 1
order by 2 desc
