-- The settings that matter to the labs, with where each value comes from.
select name, setting, unit, source, pending_restart, context
from pg_settings
where name = any(%(names)s)
order by array_position(%(names)s, name)
