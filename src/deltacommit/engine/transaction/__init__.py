"""Transactions: what a writer read and stages (``transaction``), the staged commit as one
immutable value (``staged``), what each attempt stamps (``stamps``) and the one ``commitInfo``
builder (``commit_info``)."""
