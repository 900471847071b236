-- While every client of a run waits for a heavyweight lock held outside the run: who holds it.
-- No row otherwise. {application_name} is the run's own (labkit-run-<hex>), set by labkit.
with run as (
    select pid, wait_event_type from pg_stat_activity where application_name = '{application_name}'
), holders as (
    select distinct a.pid, a.application_name, a.state
    from run r
    cross join lateral unnest(pg_blocking_pids(r.pid)) as b(pid)
    join pg_stat_activity a on a.pid = b.pid
    where r.wait_event_type = 'Lock' and a.application_name is distinct from '{application_name}'
)
select (select count(*) from run) as clients,
       string_agg(case when h.application_name like 'labkit-%' then substr(h.application_name, 8)
                       else 'pid ' || h.pid end || ' (' || coalesce(h.state, 'no state') || ')', ', '
                  order by h.pid) as holders
from holders h
having (select count(*) from run) > 0
   and not exists (select 1 from run where wait_event_type is distinct from 'Lock')
