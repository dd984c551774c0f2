"""What a cold append must not load, checked in fresh processes by tests/s3/test_light_client.py
(appends by URI on S3, conditional put and the DynamoDB log store) and
tests/test_cold_declarations.py (a partitioned table with identity, row tracking and in-commit
timestamps, stamped all the same): a module that comes back onto the append path fails both."""

from __future__ import annotations

#: The row-level verbs (DELETE, UPDATE, MERGE), compaction, and the row-level conflict check with
#: the file statistics it evaluates, which only a row-level transaction needs (a blind append's
#: conflicts are checked file by file), with the rebase of a row-level retry; the checks of CHECK
#: constraints, invariants and generated columns, which load only for a table that declares one
#: (tests/test_cold_declarations.py: such a table still enforces them); and the read verbs with
#: everything reads need: the data-file reader, the expression parser and evaluator, file pruning
#: and the add-action columns; group commit, which loads for a table opened with it; the
#: maintenance verbs, property and schema changes.
NOT_LOADED_BY_APPENDS = (
    "deltacommit.ops.delete", "deltacommit.ops.update", "deltacommit.ops.merge",
    "deltacommit.ops.rowlevel", "deltacommit.ops.optimize", "deltacommit.engine.rewrite_check",
    "deltacommit.protocol.row_conflicts", "deltacommit.engine.commit.row_rebase",
    "deltacommit.protocol.expressions.constraints", "deltacommit.protocol.expressions.generated",
    "deltacommit.ops.read", "deltacommit.engine.scan", "deltacommit.protocol.file_pruning",
    "deltacommit.protocol.add_actions", "deltacommit.io.deletion_vectors",
    "deltacommit.protocol.expressions.parser", "deltacommit.protocol.expressions.lexer",
    "deltacommit.protocol.expressions.ast", "deltacommit.protocol.expressions.predicates",
    "deltacommit.protocol.expressions.evaluator", "deltacommit.protocol.expressions.row_filters",
    "deltacommit.engine.group.threads", "deltacommit.engine.group.host",
    "deltacommit.ops.maintenance", "deltacommit.ops.properties", "deltacommit.ops.schema_changes",
)
