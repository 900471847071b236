-- When this backend last read the configuration files (it changes once a reload reached it).
select pg_conf_load_time()
