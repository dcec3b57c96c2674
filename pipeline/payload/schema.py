"""Spark DDL for a layout, as a string, so this package never imports pyspark.

A/W → string; B ≤ 2 bytes → int, ≤ 4 → bigint, ≤ 8 → decimal(20,0) (B is unsigned), longer →
binary; F ≤ 4 → int, 8 → bigint; P → decimal(2·len−1, scale); U → decimal(len, scale);
G → double; MU/PE fields → array<…>; PE groups → array<struct<…>>; count fields are ints.
Variable length (0): A/W → string, B → binary, P/U → decimal(29, scale).
"""

from __future__ import annotations

from .errors import LayoutError
from .layout import FieldSpec, Filler, GroupSpec, RecordLayout

SPARK_MAX_PRECISION = 38


def _binary(length: int) -> str:
    if length <= 2:
        return "int"
    if length <= 4:
        return "bigint"
    return "decimal(20,0)" if length <= 8 else "binary"


def spark_type(spec: FieldSpec) -> str:
    """Spark SQL type of one value of ``spec``."""
    if spec.format in "AW":
        return "string"
    if spec.format == "B":
        return "binary" if spec.variable else _binary(spec.length)
    if spec.format == "F":
        return "int" if spec.length <= 4 else "bigint"
    if spec.format == "G":
        return "double"
    if spec.digits > SPARK_MAX_PRECISION:
        raise LayoutError(f"{spec.name}: {spec.digits} digits exceed Spark's decimal(38)")
    return f"decimal({spec.digits},{spec.scale})"


def _quote(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def _column_type(item: FieldSpec | GroupSpec) -> str:
    if isinstance(item, GroupSpec):
        members = ",".join(f"{_quote(m.column)}:{spark_type(m)}" for m in item.members)
        return f"array<struct<{members}>>"
    return f"array<{spark_type(item)}>" if item.repeated else spark_type(item)


def spark_ddl(layout: RecordLayout) -> str:
    """``"`col` type, …"`` for ``StructType.fromDDL`` / ``spark.createDataFrame(schema=…)``."""
    return ", ".join(
        f"{_quote(i.column)} {_column_type(i)}" for i in layout.items if not isinstance(i, Filler)
    )
