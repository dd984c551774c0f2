"""MERGE: deltalake's ``TableMerger`` builder (``merger``) on the pure per-file work of
``plan``, which Spark tasks call as well."""

from deltacommit.ops.merge.merger import TableMerger

__all__ = ["TableMerger"]
