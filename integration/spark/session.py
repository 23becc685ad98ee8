"""The local Spark session both Spark scripts of integration/ start: local[2] with the Iceberg
runtime and one Iceberg catalog configured from KEY=VALUE catalog properties."""

import argparse
import sys

from pyspark.sql import SparkSession


def parser():
    """The arguments both scripts take: --jars, --catalog, --conf KEY=VALUE ..., --table ..."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--jars", required=True)
    ap.add_argument("--catalog", required=True)
    ap.add_argument("--conf", action="append", default=[])
    ap.add_argument("--table", action="append", default=[])
    return ap


def build(app, jars, catalog, confs, extensions=False):
    """Starts the session; extensions adds Iceberg's SQL extensions (CALL procedures)."""
    b = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.jars", jars)
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.catalog.%s" % catalog, "org.apache.iceberg.spark.SparkCatalog")
    )
    if extensions:
        b = b.config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    for kv in confs:
        k, sep, v = kv.partition("=")
        if not sep:
            sys.exit("--conf %r is not KEY=VALUE" % kv)
        b = b.config("spark.sql.catalog.%s.%s" % (catalog, k), v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
