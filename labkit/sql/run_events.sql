-- What changes a cost during a run, counted just before and just after it (labkit.experiment):
-- this database's autovacuum and autoanalyze visits (pg_stat_user_tables; a vacuum reports its
-- count when it ends, so one still going is counted from pg_stat_progress_vacuum), and the
-- server's checkpoints with the buffers they wrote (pg_stat_checkpointer, PostgreSQL 17 and later).
-- The checkpointer reports its counts when a checkpoint ends (pgstat_report_checkpointer in
-- src/backend/postmaster/checkpointer.c), so one still going is seen where it waits: the
-- checkpointer writing or syncing (an IO wait, or CheckpointWriteDelay between a spread
-- checkpoint's writes), or a backend waiting for one to start or end (CHECKPOINT, pg_backup_start).
select (select coalesce(sum(autovacuum_count), 0) from pg_stat_user_tables)::bigint as autovacuum,
       (select coalesce(sum(autoanalyze_count), 0) from pg_stat_user_tables)::bigint as autoanalyze,
       (select count(*) from pg_stat_progress_vacuum where datname = current_database())::int as vacuuming,
       c.num_done::bigint as checkpoints_done, c.num_requested::bigint as checkpoints_requested,
       c.buffers_written::bigint as checkpoint_buffers,
       (select count(*) from pg_stat_activity a
        where (a.backend_type = 'checkpointer' and (a.wait_event_type = 'IO' or a.wait_event = 'CheckpointWriteDelay'))
           or a.wait_event in ('CheckpointStart', 'CheckpointDone'))::int as checkpointing
from pg_stat_checkpointer c
