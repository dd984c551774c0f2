"""The checks of properties a writer sets (``DeltaTable.create``, ``set_properties``).  Pure.

``TableConfig.check_new`` refuses unknown keys and values that do not parse; a CHECK
constraint's expression must also be one this library can enforce, which only the expression
parser can say: a constraint set that no writer here could check would be a promise to every
reader that nothing keeps.
"""

from __future__ import annotations

from collections.abc import Mapping

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import CONSTRAINT_PREFIX


def check_properties(properties: Mapping[str, object], table: str) -> None:
    """Refuse new properties this library would not honour, naming the table, the property,
    the value and what is expected; nothing is committed before this passes."""
    TableConfig.check_new(properties, table)
    for key, value in properties.items():
        if not key.lower().startswith(CONSTRAINT_PREFIX):
            continue
        assert isinstance(value, str)  # check_new refused any other value
        # The parsers load only for a CHECK constraint: ``DeltaTable`` imports this module
        # (through ``ops.create``), and a cold append must not pay for the expression package.
        from deltacommit.protocol.expressions.parser import parse_spark_expression

        try:  # as every write reads it (``constraints.check_constraints``)
            parse_spark_expression(value)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(
                f"table {table}: CHECK constraint {key!r} cannot be enforced by "
                f"deltacommit: {e}") from None
