"""The one commit loop (``loop``), what it is told to try (``policy``), one table's log as a
writer follows it (``table_log``), and host turns (``host_turn``): the only place a version is decided."""
