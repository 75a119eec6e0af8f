"""A btfgen dataset's rows (btfgen/recordings/dataset.py) as one Spark DataFrame,
as Spark DataFrames (one function's, or every function's event columns), wherever the dataset
lives (a local directory, s3a://, abfss://, hdfs://): needs pyspark only.

Spark's `mergeSchema` merges columns by name but refuses to widen a type, and one function's
columns do differ between kernels (a `long` is 4 bytes on arm, 8 on x86_64; a struct gains a
member). Each kernel's files of the function are read on their own, then unioned by name, which
widens (int with bigint, bigint with decimal(20,0)) and fills a column one side lacks with null.
The kernels holding the function come from the dataset's own index, `_recordings/*.json`.
"""

from __future__ import annotations

from functools import reduce

from btfgen.recordings.partitions import segment


# Every row has these, whatever its function, kernel or arch, with the same types.
EVENT_COLUMNS = ("time", "timestamp", "cpu", "pid", "tid", "kind", "call", "duration_ns",
                 "arch", "recording", "host", "kernel", "function")


def read_events(spark, root: str):
    """Every function's rows, with the columns they all have (no arguments): the whole fleet
    in one DataFrame, for counts and timings across functions."""
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    root = root.rstrip("/")
    return (spark.read.option("basePath", root)
            .parquet(f"{root}/host=*/kernel=*/function=*").select(*EVENT_COLUMNS))


def read_function(spark, root: str, function: str):
    """The DataFrame of `function`'s rows in the dataset at `root` (host, kernel and function
    columns from the partitions, as strings)."""
    from pyspark.sql import functions as F

    root = root.rstrip("/")
    index = spark.read.json(f"{root}/_recordings")
    kernels = sorted(r.kernel for r in index.where(F.array_contains("functions", function))
                     .select("kernel").distinct().collect())
    if not kernels:
        raise KeyError(f"{root}: no recording of {function!r}")
    reader = spark.read.option("basePath", root).option("mergeSchema", "true")
    # Partition values stay strings: a kernel "6.1" is not a number, nor a host named 1234.
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    parts = [reader.parquet(f"{root}/host=*/{segment('kernel', k)}/{segment('function', function)}")
             for k in kernels]
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)


__all__ = ["read_events", "read_function"]


def local_session(app: str = "btfgen", cores: int = 2):
    """A Spark session on this machine alone (local mode), for a dataset on its disk.

    Spark names the machine by resolving its host name, and a host whose name does not
    resolve (a container, a chroot without /etc/hosts entries) fails before the session
    starts ("Name or service not known"): on one machine, loopback is the right answer, so it
    is the default unless SPARK_LOCAL_IP / SPARK_LOCAL_HOSTNAME say otherwise, and PySpark's
    side talks over Unix sockets."""
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("SPARK_LOCAL_HOSTNAME", "localhost")
    session = (SparkSession.builder.master(f"local[{cores}]").appName(app)
               .config("spark.ui.enabled", "false")
               # PySpark's own servers on Unix sockets: its TCP ones bind "localhost", which a
               # host without /etc/hosts (a bare chroot) cannot resolve either.
               .config("spark.python.unix.domain.socket.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", str(cores))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session
