"""A table's configuration: which protocol versions and table features deltacommit reads and
writes (``features``), which properties ask for which features (``feature_requests``), and
duration-valued properties (``intervals``).  Pure."""
