-- While every client of a run waits for a heavyweight lock: who outside the run holds it.
-- No row otherwise. {application_name} is the run's own (labkit-run-<hex>), set by labkit.
-- The lock table is read once per sample, and only while the run is blocked: reading it takes
-- every lock-manager partition lock (GetLockStatusData in lock.c), which a run that is not
-- blocked never pays for. A holder is a session outside the run granted a lock, on an object a
-- client of the run waits for, in a mode that conflicts with the one the client asked for
-- (the conflict table of the manual's "Explicit Locking" chapter, 13.3.1), or a session outside
-- the run that asked for such a lock earlier and waits itself: a request also queues behind
-- conflicting requests that came first (LockAcquireExtended in lock.c checks the wait mask).
-- A prepared transaction holds its locks with no pid: it is named by its virtual transaction.
with run as (
    select pid, wait_event_type from pg_stat_activity
    where application_name = '{application_name}' and backend_type = 'client backend'
), blocked as (
    select count(*) > 0 and bool_and(wait_event_type is not distinct from 'Lock') as yes from run
), locks as materialized (
    select * from pg_locks where (select yes from blocked)
), modes(mode, rank) as (
    values ('AccessShareLock', 1), ('RowShareLock', 2), ('RowExclusiveLock', 3), ('ShareUpdateExclusiveLock', 4),
           ('ShareLock', 5), ('ShareRowExclusiveLock', 6), ('ExclusiveLock', 7), ('AccessExclusiveLock', 8)
), conflicts(asked, held) as (
    -- lock.c's LockConflicts: which held modes each asked mode waits for
    select a.rank, h.rank from modes a, modes h
    where (a.rank, h.rank) in ((1, 8), (2, 7), (2, 8), (3, 5), (3, 6), (3, 7), (3, 8),
                               (4, 4), (4, 5), (4, 6), (4, 7), (4, 8), (5, 3), (5, 4), (5, 6), (5, 7), (5, 8),
                               (6, 3), (6, 4), (6, 5), (6, 6), (6, 7), (6, 8),
                               (7, 2), (7, 3), (7, 4), (7, 5), (7, 6), (7, 7), (7, 8),
                               (8, 1), (8, 2), (8, 3), (8, 4), (8, 5), (8, 6), (8, 7), (8, 8))
), holders as (
    select distinct h.pid, h.virtualtransaction
    from locks w
    join run r on r.pid = w.pid and not w.granted
    join locks h on (h.granted or h.waitstart < w.waitstart)
                and h.virtualtransaction <> w.virtualtransaction
                and h.locktype = w.locktype
                and h.database is not distinct from w.database and h.relation is not distinct from w.relation
                and h.page is not distinct from w.page and h.tuple is not distinct from w.tuple
                and h.virtualxid is not distinct from w.virtualxid
                and h.transactionid is not distinct from w.transactionid
                and h.classid is not distinct from w.classid and h.objid is not distinct from w.objid
                and h.objsubid is not distinct from w.objsubid
    join modes wm on wm.mode = w.mode
    join modes hm on hm.mode = h.mode
    join conflicts c on c.asked = wm.rank and c.held = hm.rank
    where h.pid is null or h.pid not in (select pid from run)
)
select (select count(*) from run) as clients,
       string_agg(case when h.pid is null then 'prepared transaction ' || h.virtualtransaction
                       when a.application_name like 'labkit-%' then substr(a.application_name, 8)
                       else 'pid ' || h.pid end || ' (' || coalesce(a.state, 'no state') || ')', ', '
                  order by h.pid) as holders
from holders h
left join pg_stat_activity a on a.pid = h.pid
having (select yes from blocked) and count(*) > 0
