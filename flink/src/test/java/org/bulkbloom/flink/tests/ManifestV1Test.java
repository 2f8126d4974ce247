package org.bulkbloom.flink.tests;

import java.nio.file.Path;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.junit.jupiter.api.Test;

/**
 * A savepoint whose keyed state has version 1 manifests (each sealed part's bits, the open part's
 * base and the logs of the checkpoints before it), written by the operator of commit a4daa07 with
 * {@link LegacySavepointWriter} at parallelism 2 and checkpoints every 100 ms, resumes on RocksDB
 * at parallelism 3: the records kept before it and after it are exactly those the library's
 * window shards keep on the whole stream. Property bulkbloom.test.fixture: the fixture folder
 * (flink/src/test/data/manifest-v1-savepoint; its README says how it was made).
 */
public final class ManifestV1Test {

  @Test
  void versionOneManifestsResume() throws Exception {
    final Path fixture = Path.of(Records.property("bulkbloom.test.fixture"));
    final Configuration conf = new Configuration();
    conf.set(
        StateRecoveryOptions.SAVEPOINT_PATH, fixture.resolve("savepoint").toUri().toString());
    conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(3);
    KeptIds.KEPT.clear();
    Records.dedup()
        .apply(Records.source(env, 0).uid("records"))
        .uid("dedup")
        .map(new KeptIds())
        .uid("collect")
        .sinkTo(new DiscardingSink<>());
    env.execute("version 1 manifests");

    Records.checkSame(
        Records.libraryKept(Records.SHARDS, true),
        KeptIds.withKeptBefore(fixture),
        "resumed from version 1 manifests against the library");
  }
}
