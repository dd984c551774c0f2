"""What users call, one module per verb: write and append, the appender, delete, optimize
(compaction and auto-compaction), maintenance (checkpoints, log cleanup, VACUUM), properties,
schema changes, coordination and the history checker."""
