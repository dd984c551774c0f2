"""The engine: the only place a version is decided.

Read: ``snapshot`` (snapshots, the checkpoint reader, the process's state cache) and ``scan``
(the one data-file reader).  Commit: ``transaction`` (staging), ``commit`` (the one commit
loop, table log, host turns), ``group`` (group commit) and ``hooks`` (post-commit
checkpoints and cleanup).  ``rewrite_check`` proves a rewrite's output before it commits.
"""
