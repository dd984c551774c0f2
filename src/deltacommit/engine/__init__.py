"""The commit engine: what sits between the pure Delta protocol (``log/``, ``conflicts``) and
the user's table objects (``DeltaTable``, ``Transaction``, group commit).

One table-log object per table object (``table_log.TableLog``: the snapshot cache, refreshes,
the recent commits), one staged-commit value (``staged.StagedCommit``), one ``commitInfo``
builder (``commit_info``), one commit loop (``loop.CommitLoop``: conflict checks, rebase,
backoff) and the post-commit hooks (``hooks``).  A ``Transaction`` is a group of one fed to the
loop; the group committer (``coalesce``) feeds it groups.  Nothing here imports ``table``,
``transaction`` or ``coalesce``: they are built on this layer, not the other way round.
"""
