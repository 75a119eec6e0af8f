"""What a user does with recordings (`btfgen trace --record`) after the run: read them back
(reader.py, every version; grouping.py: a span's records per function and kind), print them
again (replay.py, `btfgen decode`), decode them into columns (columnar.py: numpy and pyarrow),
gather a fleet's into one Parquet dataset (dataset.py; partitions.py: its paths' escaping) and
read it with Spark (spark.py: pyspark); a recording's stacks (--stack) named from its notes
(stack_notes.py, recorded_stacks.py) and as columns (stack_columns.py).
The file format and its writer are the run side's (btfgen.probe.recording): no target reads a
recording back."""
