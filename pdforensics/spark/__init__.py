"""The classification rules of queries/views on Apache Spark (the optional extra `pdforensics[spark]`).

translate: queries/views/*.sql -> Spark SQL (sqlglot, pinned; golden files in tests/golden/spark)
load:      a DuckDB database's tables -> Parquet -> Spark temporary views (rooms as decimal(20,0))
run:       the translated views on Spark, in dependency order, and the comparison with DuckDB
session:   a local, loopback-only SparkSession; the settings the rules need on any cluster
engine:    `verdict --engine spark|duckdb --parquet DIR`: the layout read, the answer built by pdforensics.verdict
job:       the spark-submit entry point for a cluster
"""
