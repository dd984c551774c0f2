"""The Delta protocol, pure: bytes and values in, values out, no I/O.

``actions`` (the log's actions and their JSON codec), ``log`` (file names, paths, the log
segment a snapshot is built from), ``files`` (the live file list as Arrow), ``replay`` (commits
folded into a table's state), ``checkpoint`` (the checkpoint format), ``add_actions`` (the file
list as one Arrow table in deltalake's columns), ``stats`` (file statistics), ``schema`` (Arrow <->
Delta schemas, column mapping, type widening, nested fields), ``table_config`` (table
properties, features and the protocol they need), ``property_checks`` (the checks of new
properties, expressions included), ``features`` (what each table feature
asks of a writer: in-commit timestamps, row tracking, identity columns), ``expressions`` (the
SQL subset of predicates, constraints and generated columns, evaluated with Arrow),
``conflicts`` (Delta's conflict matrix), ``deletion_vectors`` (their codec), ``partitions``,
``zorder``, ``fingerprint`` (a row multiset's fingerprint) and ``commit_window`` (how long
uncommitted files are safe from VACUUM), ``json_values`` (JSON decoding and float
texts).  Everything here is tested exhaustively with
hypothesis, which is why nothing here may do I/O.

Inside the layer, packages and root modules are ordered too (``tests/architecture``): ``log``
< ``files`` < ``replay`` < ``checkpoint``; ``table_config`` < ``expressions`` <
``property_checks``."""
