"""Bytes in and out of a location, and how ``N.json`` comes to exist exactly once.

``storage`` (object stores: local, memory, S3; one registry by URI scheme), ``aws`` (settings,
clients, errors, the one retry policy), ``logstore`` (the commit mechanisms, one registry by
mechanism), ``datafiles`` (Parquet data files written with statistics), ``deletion_vectors``
(reading a data file's deletion vector) and ``journal`` (journals of acknowledged writes)."""
