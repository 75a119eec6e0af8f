"""A dataset's partition values as path segments (`host=H/kernel=K/function=F`), one escaping for
the writer (dataset.py) and every reader (spark.py; DuckDB's queries): Hive's, `%XX` for every
byte but letters, digits and `_.-~`, which Spark and DuckDB undo when they read the partition
columns back. `.` and `..` are escaped too (`%2E`, `%2E%2E`): as path segments they would mean
the directory itself or its parent. The glob characters are escaped with the rest, so a path
made here matches only its own value when a reader globs.

The standard library only, importing nothing of btfgen: the Spark reader needs pyspark alone.
"""

from __future__ import annotations

from urllib.parse import quote


def hive(value: str) -> str:
    """`value` as one partition path segment's value."""
    text = quote(value, safe="")
    return text.replace(".", "%2E") if value in (".", "..") else text


def segment(column: str, value: str) -> str:
    """`column=value`, the value escaped (hive)."""
    return f"{column}={hive(value)}"
