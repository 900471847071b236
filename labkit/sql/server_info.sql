select current_setting('server_version') as version,
       current_setting('server_version_num')::int as version_num,
       current_user as user_name,
       (select rolsuper from pg_roles where rolname = current_user) as superuser
