-- The backends of one run (its clients carry the run's application_name), for the cpu probe and perf.
-- Parallel workers carry their leader's application_name: only client backends are the run's clients
-- (perf attached to these does not follow a worker the postmaster forks later).
select pid from pg_stat_activity where application_name = %(application_name)s and backend_type = 'client backend'
