-- The lock a session waits for, and who holds it back (interleave's lanes): one ungranted request of one pid.
select l.locktype, l.mode,
       coalesce(l.relation::regclass::text, '') || coalesce(' page ' || l.page, '')
         || coalesce(' tuple ' || l.tuple, '') || coalesce(l.transactionid::text, '')
         || coalesce(l.virtualxid, '')
         || case when l.locktype = 'advisory' then l.classid::text || ',' || l.objid::text else '' end as what,
       pg_blocking_pids(l.pid) as held_by
from pg_locks l
where l.pid = %(pid)s and not l.granted
limit 1
