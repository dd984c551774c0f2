"""The one commit loop (``loop``), what it is told to try (``policy``) and how its failures are
read (``outcome``); what it commits: the staged commit as one immutable value (``staged``),
what each attempt stamps (``stamps``) and the one ``commitInfo`` builder (``commit_info``);
one table's log as a writer follows it (``table_log``), the table it needs (``handle``), and
host turns (``host_turn``): the only place a version is decided."""
