"""What table features ask of every commit: in-commit timestamps, row tracking (fresh row ids
and row commit versions) and identity columns (values above the high-water mark).  Pure."""
