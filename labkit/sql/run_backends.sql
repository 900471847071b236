select count(*) from pg_stat_activity where application_name = %(application_name)s
