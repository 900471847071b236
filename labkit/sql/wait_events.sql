-- Every client of one run, by what it is doing right now: one class each, so they add up to the
-- run's connected clients. {application_name} is the run's (labkit-run-<hex>), set by labkit.
--   CPU                  active, not waiting (running or runnable)
--   <type>: <event>      active and waiting: Lock, LWLock, IO, IPC, ...
--   Client: ClientRead   idle: waiting for pgbench's next statement
--   idle in transaction  between two statements of a transaction (it keeps its locks)
-- pg_stat_activity is a copy of each backend's status entry, read without locks. Parallel
-- workers carry their leader's application_name: only client backends are the run's clients.
select case when state like 'idle in transaction%' then 'idle in transaction'
            when wait_event_type is null then 'CPU'
            else wait_event_type || ': ' || wait_event end as wait,
       count(*)::int as backends
from pg_stat_activity
where application_name = '{application_name}' and backend_type = 'client backend'
group by 1
order by 2 desc
