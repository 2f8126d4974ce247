"""What bulkbloom.spark checks before it runs: the session, the input's plan, the arguments."""

from __future__ import annotations

import logging
from typing import Any, Optional

from pyspark.sql import DataFrame

_log = logging.getLogger("bulkbloom.spark")


def _check_names(df: DataFrame) -> None:
    clash = [name for name in df.columns if name.startswith("__bulkbloom_")]
    if clash:
        raise ValueError(f"columns {clash} use the prefix __bulkbloom_ that dedup works with")


def _stable_input(df: DataFrame, unstable_input: str) -> DataFrame:
    """`df`, or, where reading it again may not give the same rows in the same partitions in the
    same order (module documentation, "What is assumed of the input"), `df` checkpointed
    (``unstable_input="checkpoint"``, logged) or a ValueError (``"error"``)."""
    if unstable_input not in ("checkpoint", "error"):
        raise ValueError(f"unstable_input {unstable_input!r} is not 'checkpoint' or 'error'")
    if df.isStreaming:
        raise ValueError("bulkbloom.spark dedups batch DataFrames only; this one is streaming")
    reason = _unstable_reason(df._jdf.queryExecution().executedPlan())
    if reason is None:
        return df
    if unstable_input == "error":
        raise ValueError(
            f"the input may give its rows in another order each time it is read ({reason}), and "
            "dedup numbers the rows of two reads alike; checkpoint or write it first, or pass "
            "unstable_input='checkpoint'"
        )
    _log.warning("the input may give its rows in another order each time it is read (%s): "
                 "dedup reads it from a local checkpoint", reason)
    return df.localCheckpoint(eager=True)


def _unstable_reason(node: Any) -> Optional[str]:
    """What in the physical plan `node` may make a second read of it give other rows, or rows in
    another order (None: nothing): a shuffle (the reducer fetches blocks in whatever order they
    arrive; a round-robin repartition also deals rows by that order), a non-deterministic
    expression (rand(), a UDF marked so), or an RDD Spark itself calls indeterminate."""
    name = node.getClass().getSimpleName()
    if name == "AdaptiveSparkPlanExec":  # AQE: the plan before it ran, with its exchanges
        return _unstable_reason(node.inputPlan())
    if name == "InMemoryTableScanExec":  # a cached DataFrame is recomputed where evicted
        return _unstable_reason(node.relation().cachedPlan())
    if "Shuffle" in name:
        return f"a shuffle: {node.simpleString(8)}"
    if name == "RDDScanExec":
        level = node.rdd().outputDeterministicLevel().toString()
        if level != "DETERMINATE":
            return f"an RDD whose output Spark calls {level.lower()}: {node.simpleString(8)}"
    children = node.children()
    for index in range(children.size()):
        reason = _unstable_reason(children.apply(index))
        if reason is not None:
            return reason
    if not node.deterministic():  # its children are: an expression of its own is not
        return f"a non-deterministic expression: {node.simpleString(8)}"
    return None


_SPLIT_CORES = "spark.sql.files.minPartitionNum"


def _pin_file_splits(spark: Any) -> Optional[str]:
    """Holds the size Spark cuts input files into partitions by at its value now; returns the
    setting to unset afterwards (None: the caller had set it, and it stays).

    Spark computes that size when it plans each query, from ``spark.sql.files.minPartitionNum``,
    by default the cores the cluster has at that moment (``spark.sql.leafNodeDefaultParallelism``,
    else ``spark.default.parallelism``, else the executors' cores). The routing and the filtering
    are two queries that number the input's rows by partition alike: executors that join or leave
    between them (dynamic allocation, an autoscaling cluster) would cut the files otherwise, and
    the drops would fall on other rows."""
    if spark.conf.get(_SPLIT_CORES, None) is not None:
        return None
    cores = spark.conf.get("spark.sql.leafNodeDefaultParallelism", None)
    if cores is None:
        cores = str(spark.sparkContext.defaultParallelism)
    spark.conf.set(_SPLIT_CORES, cores)
    return _SPLIT_CORES


def _classic(spark: Any) -> None:
    """Refuses a Spark Connect session: bulkbloom.spark's driver side needs the driver's JVM (its
    plans, its Hadoop filesystems) and a filter directory the executors see."""
    _jvm(spark, "bulkbloom.spark")


def _default_broadcast_drops(spark: Any) -> int:
    """The most dropped rows dedup's filtering broadcasts by default (module documentation, "How
    it runs"): as many 8-byte row ids as Spark's own broadcast threshold holds."""
    threshold = spark.conf.get("spark.sql.autoBroadcastJoinThreshold", "10MB")
    size = spark._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(threshold)
    return max(0, int(size) // 8)


def _check_nulls(nulls: str) -> None:
    if nulls not in ("error", "keep", "drop"):
        raise ValueError(f"nulls {nulls!r} is not 'error', 'keep' or 'drop'")


def _jvm(spark: Any, what: str) -> Any:
    """The driver's JVM gateway, which Spark Connect clients have not."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        raise RuntimeError(
            f"{what} needs a classic Spark session (the driver's JVM); this is a Spark Connect "
            "session: run the job with spark-submit or a classic SparkSession"
        )
    return jvm
