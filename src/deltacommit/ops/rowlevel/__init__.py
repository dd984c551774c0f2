"""The rewrite every row-level operation shares (UPDATE, MERGE and DELETE): which files it
opens (``candidates``), how it reads them and writes and proves their change (``rewrite``), and
how the write driver runs it (``job``).  The verbs themselves are ``ops.update``,
``ops.delete`` and ``ops.merge``."""

from deltacommit.ops.rowlevel.candidates import (
    KEYS_PRUNED_BY,
    bound_condition,
    candidate_files,
    read_partitions,
)
from deltacommit.ops.rowlevel.job import (
    Done,
    FileRows,
    Planned,
    RowLevelJob,
    record_rows,
    rewrite_spark_metrics,
    run_row_level,
)
from deltacommit.ops.rowlevel.rewrite import (
    FileChange,
    ReadBatch,
    ReadFile,
    Rewritten,
    RowLevelTable,
    RowRewrite,
    replaced,
    taken,
)

__all__ = [
    "KEYS_PRUNED_BY",
    "Done",
    "FileChange",
    "FileRows",
    "Planned",
    "ReadBatch",
    "ReadFile",
    "Rewritten",
    "RowLevelJob",
    "RowLevelTable",
    "RowRewrite",
    "bound_condition",
    "candidate_files",
    "read_partitions",
    "record_rows",
    "replaced",
    "rewrite_spark_metrics",
    "run_row_level",
    "taken",
]
