"""The SQL subset deltacommit evaluates with Arrow: partition predicates and filters
(``predicates``), predicates over rows (``row_filters``), CHECK constraints and invariants
(``constraints``), generated columns (``generated``), and the Spark semantics they share
(``sql_semantics``: literals, NaN ordering, ANSI overflow).  Pure."""
