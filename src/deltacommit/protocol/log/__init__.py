"""The log as files: their names (``names``), the one rule for what file a path in the log
names (``paths``), the ``_last_checkpoint`` hint and the log segment a snapshot is built from
(``segment``).  Pure."""
