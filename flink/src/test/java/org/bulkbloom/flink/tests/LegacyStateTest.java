package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.TreeSet;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.ExceptionUtils;
import org.bulkbloom.flink.BloomDedup;
import org.junit.jupiter.api.Test;

/**
 * A savepoint written by the operator before sizing per period (fixed-size shards; the fixture of
 * {@link LegacySavepointWriter}, taken at parallelism 2 after record 9227) restores with {@link
 * BloomDedup#fixedSizeShards()}, here at parallelism 3, and the records kept before it and after
 * it are exactly those the command line keeps. Restored into an operator that sizes per period it
 * fails at once, naming the option. Properties: bulkbloom.test.cli, the bulkbloom executable;
 * bulkbloom.test.scratch, a scratch folder; bulkbloom.test.fixture, the fixture folder.
 */
public final class LegacyStateTest {

  private static void resume(BloomDedup<Tuple3<String, Long, Long>> dedup, Path savepoint)
      throws Exception {
    final Configuration conf = new Configuration();
    conf.set(StateRecoveryOptions.SAVEPOINT_PATH, savepoint.toUri().toString());
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(3);
    dedup
        .apply(Records.source(env, 0).uid("records"))
        .uid("dedup")
        .map(new KeptIds())
        .uid("collect")
        .sinkTo(new DiscardingSink<>());
    env.execute("legacy state");
  }

  @Test
  void refusedBySizedShards() throws Exception {
    final Path fixture = Path.of(Records.property("bulkbloom.test.fixture"));
    try {
      resume(Records.dedup(), fixture.resolve("savepoint"));
      fail("fixed-size state restored into shards sized per period");
    } catch (Exception e) {
      final String message =
          ExceptionUtils.findThrowableWithMessage(e, "fixedSizeShards()")
              .map(Throwable::getMessage)
              .orElseGet(() -> fail("no message naming fixedSizeShards in " + e, e));
      System.out.println("refused: " + message);
    }
  }

  @Test
  void restoresWithFixedSizeShards() throws Exception {
    final Path dir = Files.createDirectories(Path.of(Records.property("bulkbloom.test.scratch")));
    final Path fixture = Path.of(Records.property("bulkbloom.test.fixture"));
    final TreeSet<Long> expected = Records.cliKept(Records.property("bulkbloom.test.cli"), dir);

    KeptIds.KEPT.clear();
    resume(Records.dedup().fixedSizeShards(), fixture.resolve("savepoint"));
    Records.checkSame(
        expected,
        KeptIds.withKeptBefore(fixture),
        "restored from the fixed-size savepoint against the command line");
  }
}
