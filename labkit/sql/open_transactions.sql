-- Which of these backends sit idle inside a transaction, since when, and the tables they hold locks on.
-- (A failed transaction block, 'idle in transaction (aborted)', has already released its locks
-- and its snapshot: it blocks nobody until its rollback.)
select a.pid,
       a.state,
       extract(epoch from now() - a.xact_start)::float8 as open_s,
       coalesce(array_agg(distinct c.relname::text || ' (' || l.mode || ')' order by c.relname::text || ' (' || l.mode || ')')
                filter (where c.relname is not null), '{}') as holds
from pg_stat_activity a
left join pg_locks l on l.pid = a.pid and l.granted and l.locktype = 'relation'
left join pg_class c on c.oid = l.relation and c.relkind in ('r', 'p', 'm')
                    and c.relnamespace <> 'pg_catalog'::regnamespace
where a.pid = any(%(pids)s)
  and a.state = 'idle in transaction'
group by a.pid, a.state, a.xact_start
