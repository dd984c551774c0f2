"""The SQL deltacommit evaluates: one expression language, one tree, one parser.  Pure.

``ast`` (the tree: typed literals, columns, operators, conditions, CAST, CASE, function
calls) is read from text by ``parser`` (``lexer`` gives its tokens) and has two
interpretations: over Arrow data with Spark 4's semantics (``evaluator``, on ``operators``,
``casts``, ``functions``, ``spark_types`` and the value rules of ``sql_semantics``), and over
partition values (``partition_values``).  Its users: partition predicates and deltalake's
partition filters (``predicates``), DELETE's row filters (``row_filters``), CHECK constraints
and invariants (``constraints``) and generated columns (``generated``).  What a table declares
(``declarations``) is read without the parser or evaluator, which a writer loads only for a
table that declares something to evaluate.
"""
