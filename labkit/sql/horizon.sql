-- The backends of this database that hold the xmin horizon furthest back: every one tied on the
-- oldest value, one row each, with what it is doing (the classes of wait_events.sql).
-- A backend holds the horizon back by its own transaction id (a transaction that has written, idle or
-- not) or by its snapshot's xmin, the oldest transaction that was running when it took the snapshot;
-- so every backend that took a snapshot while one long transaction ran ties with that transaction.
-- labkit.probes.horizon_holders breaks the ties. Left out: labkit's probes (each holds a snapshot only
-- while its query runs), and autovacuum's VACUUM, whose xmin other backends ignore when they prune
-- (PROC_IN_VACUUM, set in vacuum_rel, vacuum.c); autovacuum's ANALYZE takes ordinary snapshots.
-- Another database's backends are left out: only their transaction ids count here, through this
-- database's own snapshots (ComputeXidHorizons, procarray.c).
with held as (
    select pid, application_name, state, xact_start, wait_event_type, wait_event, query,
           backend_xid, greatest(age(backend_xmin), age(backend_xid)) as xids_back
    from pg_stat_activity
    where datname = current_database()
      and coalesce(backend_xmin, backend_xid) is not null
      and pid <> pg_backend_pid()
      and application_name is distinct from 'labkit-probe'
      and (backend_type = 'client backend'
           or backend_type = 'autovacuum worker' and query not like 'autovacuum: VACUUM %')
)
select extract(epoch from clock_timestamp() - xact_start)::float8 as open_s,
       pid::text as pid,
       application_name as who,
       case when state like 'idle in transaction%' then 'idle in transaction'
            when wait_event_type is null then 'CPU'
            else wait_event_type || ': ' || wait_event end as doing,
       case when age(backend_xid) = xids_back then 'its transaction id' else 'its snapshot' end as holds_by,
       left(query, 60) as query
from held
where xids_back = (select max(xids_back) from held)
order by xact_start
