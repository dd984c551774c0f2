"""What the process gives every layer: time and randomness as injectable sources
(``clock``), and threads for one call's parallel work that keep working while the interpreter
shuts down (``threads``).  The lowest layer: it imports nothing else of the package."""
