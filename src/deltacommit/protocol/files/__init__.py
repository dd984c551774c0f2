"""The live file list: kept as Arrow from a checkpoint until someone asks for Python objects
(``lazy_files``: the file maps; ``action_rows``: a checkpoint's rows, read and decoded on
demand; ``from_arrow``: the rows as ``Add`` and ``Remove`` objects and keys).  Pure."""
