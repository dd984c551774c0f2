"""Checkpoint files: their Arrow schema and the conversion to and from a table's state.  Pure."""
