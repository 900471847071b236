-- What kind of backend each pid is (an autovacuum worker is cancelled when it blocks a statement).
select backend_type, query
from pg_stat_activity
where pid = any(%(pids)s)
