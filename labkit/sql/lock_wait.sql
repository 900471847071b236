-- Whether one session's backend waits for a heavyweight lock now, and which backends block it.
select wait_event_type, wait_event, pg_blocking_pids(pid) as blocked_by
from pg_stat_activity
where pid = %(pid)s
