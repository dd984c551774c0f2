"""File statistics: computed as Spark computes them (``compute``), read from a checkpoint's
typed structs (``parsed``), and held column-wise as Arrow (``arrays``).  Pure."""
