-- How many connections are in use and how many the server allows to ordinary users.
select (select count(*) from pg_stat_activity where backend_type = 'client backend')::int as in_use,
       current_setting('max_connections')::int as max_connections,
       current_setting('superuser_reserved_connections')::int
         + coalesce(current_setting('reserved_connections', true)::int, 0) as reserved
