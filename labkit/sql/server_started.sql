-- When the server started: a session that finds it changed after it connected again knows the server restarted.
select pg_postmaster_start_time()
