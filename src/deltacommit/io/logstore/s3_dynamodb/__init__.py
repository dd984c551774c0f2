"""Spark's S3DynamoDBLogStore protocol: one DynamoDB item per commit decides who owns ``N.json``.

S3 could not create an object exactly once until 2024, so Delta on Spark (and delta-rs up to
1.6.0) let a DynamoDB table decide instead.  Spark fleets still write this way, and a writer
joins them only by speaking the protocol exactly: the same items, the same conditions, the same
repair duty.  Each commit is an item (``BaseExternalLogStore`` / ``S3DynamoDBLogStore`` in
delta-io/delta; ``entry`` spells out its attributes): ``tablePath`` and ``fileName`` key it,
``tempPath`` names the temp file holding the commit, ``complete`` says whether ``N.json`` holds
it, and ``expireTime`` (on complete entries) lets TTL remove it.

Writing version N: (0) N.json must not exist; (1) entry N-1, if incomplete, is repaired, and
N-1.json must exist (version 0: entries of a deleted table must not linger); (2) write the temp
file ``T(N)``, then ``PutItem`` the entry with ``attribute_not_exists(fileName)``: the one
linearisation point, a failed condition means another writer owns N; (3) copy ``T(N)`` to
``N.json`` without ever replacing an object; (4) mark the entry complete.  Once the entry
exists the commit has happened: a failure in (3) or (4) is logged and left to the repair that
readers (the latest entry, on every listing and refresh) and the next writer (entry N-1) do.
Only the latest entry can be incomplete, because every writer of N+1 first completes N.

Marking complete is an ``UpdateItem`` with the condition ``complete = "false"`` (as delta-rs
does) rather than Spark's unconditional ``PutItem`` of the whole item: it can only flip an
incomplete entry, so it never resurrects an entry that TTL or ``dynamodb repair`` removed,
never rewrites ``tempPath`` from a repairer's stale copy, and never pushes ``expireTime`` of a
completed entry further out; concurrent repairers all succeed (the losers' failed condition
means "already complete").  Spark and delta-rs read the result identically.

The modules, by concern (as object_store splits its AWS provider into builder, client,
credential and precondition): ``entry`` (the item and its codec), ``admin`` (creating and
describing the table), ``facts`` (what a process has established about a table's entries,
which spares the checks of steps 0 and 1), ``client`` (the requests, retried and explained,
and the entries read), ``fleet`` (the ``tablePath`` a table's writers share, and refusing
writers of another mechanism), ``repair`` (completing incomplete entries; the temp files),
``claim`` (steps 0 to 4) and ``log_store``.  The log store is one object whose layers are
these modules' classes, each built on the one before: ``EntryClient``, ``FleetMember``,
``EntryRepairer``, ``EntryClaimer``, and ``DynamoDBLogStore``, which reads the log through them.
"""
