"""Schemas: Arrow <-> Delta's ``schemaString`` and the casts a write needs (``arrow``), column
mapping (``column_mapping``), type widening (``type_widening``), non-nullable nested fields
(``nested``) and walking a nested schema (``walk``).  Pure."""
