"""The live file list: kept as Arrow from a checkpoint until someone asks for Python objects
(``lazy_files``), and as one Arrow table in deltalake's columns (``add_actions``).  Pure."""
