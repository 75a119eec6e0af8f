"""What a user does with recordings (`btfgen trace --record`) after the run: print them again
(replay.py, `btfgen decode`), decode them into columns (columnar.py: numpy and pyarrow), gather
a fleet's into one Parquet dataset (dataset.py; partitions.py: its paths' escaping) and read it
with Spark (spark.py: pyspark).
The file format itself is the run side's (btfgen.probe.recording)."""
