"""Reading a table's state: snapshots (immutable, built from a log segment), the checkpoint
reader, and the process's last snapshot of each table (``state_cache``, a hint checked against
storage before use)."""
