"""Fleet-wide group commit's stored records: names and codec.  Pure."""
