"""Group commit: many transactions in one Delta version, among the threads of one process
(``threads``) and the processes of one host (``host``)."""
