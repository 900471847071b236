-- The values ALTER SYSTEM gave these settings (postgresql.auto.conf), the last of each: what lab.set puts back
-- when the server will not start with a new one. A setting not there was never changed that way.
select name, setting
from pg_file_settings
where sourcefile like '%%postgresql.auto.conf' and name = any(%(names)s)
order by seqno
