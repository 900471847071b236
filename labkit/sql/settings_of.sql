-- Current values and units of the named settings (to compare an external server with the lab settings).
select name, setting, unit
from pg_settings
where name = any(%(names)s)
