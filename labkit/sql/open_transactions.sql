-- Which of these backends sit idle inside a transaction, since when, and the tables they hold locks on.
-- A failed transaction block ('idle in transaction (aborted)') has released its locks and its
-- snapshot, and shows no xact_start; but a failure inside a savepoint aborts only the
-- subtransaction: the transaction around it keeps its locks, its snapshot and its xact_start.
select a.pid,
       a.application_name,
       a.state,
       extract(epoch from now() - a.xact_start)::float8 as open_s,
       coalesce(array_agg(distinct c.oid::regclass::text || ' (' || l.mode || ')'
                          order by c.oid::regclass::text || ' (' || l.mode || ')')
                filter (where c.oid is not null), '{}') as holds
from pg_stat_activity a
left join pg_locks l on l.pid = a.pid and l.granted and l.locktype = 'relation'
left join pg_class c on c.oid = l.relation and c.relkind in ('r', 'p', 'm')
                    and c.relnamespace <> 'pg_catalog'::regnamespace
where a.pid = any(%(pids)s)
  and a.state in ('idle in transaction', 'idle in transaction (aborted)')
  and a.xact_start is not null
group by a.pid, a.application_name, a.state, a.xact_start
