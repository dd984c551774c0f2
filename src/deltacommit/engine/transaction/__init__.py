"""Transactions: what a writer reads and stages (``transaction``), and the small table a
transaction commits through (``log_table``).  A transaction hands the commit loop a staged
commit (``engine.commit.staged``); it sits above the loop and group commit, which it uses."""
