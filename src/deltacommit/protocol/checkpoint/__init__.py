"""Checkpoint files: their Arrow schema (``schema``) and the conversion from a table's state
(``encode``) and back (``decode``), with what V2-spec checkpoints add (``v2``: sidecars, JSON
checkpoints).  Pure."""
