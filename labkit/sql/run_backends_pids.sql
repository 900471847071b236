-- The backends of one run (its clients carry the run's application_name), for the cpu probe.
select pid from pg_stat_activity where application_name = %(application_name)s
