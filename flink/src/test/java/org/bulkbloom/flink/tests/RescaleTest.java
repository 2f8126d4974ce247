package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.connector.source.lib.NumberSequenceSource.NumberSequenceSplit;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiter;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.junit.jupiter.api.Test;

/**
 * One input run at parallelism 1, stopped with a savepoint, resumed at 3, stopped again, resumed
 * at 2 to its end: together the three runs keep exactly the records the library's 8 window shards
 * sized per period keep on the stream. Property bulkbloom.test.scratch: a scratch folder.
 */
public final class RescaleTest {
  private static final double RECORDS_PER_SECOND = 5_000;

  /** Set once a run's stop point is reached: the source then slows down, so that the savepoint
   * reaches it before it runs out of records however long the savepoint takes to trigger. */
  private static volatile boolean stopping;

  /** 5,000 records a second, or one every 50 ms while a run is being stopped. */
  private static final class SlowWhileStopping implements RateLimiterStrategy<NumberSequenceSplit> {
    private static final long serialVersionUID = 1L;

    @Override
    public RateLimiter<NumberSequenceSplit> createRateLimiter(int parallelism) {
      final RateLimiter<?> normal =
          RateLimiterStrategy.perSecond(RECORDS_PER_SECOND).createRateLimiter(parallelism);
      return permits ->
          stopping
              ? CompletableFuture.runAsync(
                  () -> {}, CompletableFuture.delayedExecutor(50, TimeUnit.MILLISECONDS))
              : normal.acquire(permits);
    }
  }

  /** Runs from `savepoint` (or the start) at `parallelism`; stops with a savepoint once a record
   * past `stopAfter` is kept and returns its path, or runs to the end and returns null. */
  private static String run(int parallelism, String savepoint, long stopAfter, Path dir)
      throws Exception {
    final Configuration conf = new Configuration();
    if (savepoint != null) {
      conf.set(StateRecoveryOptions.SAVEPOINT_PATH, savepoint);
    }
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(parallelism);
    stopping = false;
    Records.dedup()
        .apply(Records.source(env, new SlowWhileStopping(), 100).uid("records"))
        .uid("dedup")
        .map(new KeptIds())
        .uid("collect")
        .sinkTo(new DiscardingSink<>());
    final JobClient job = env.executeAsync("rescale at " + parallelism);
    if (stopAfter < 0) {
      job.getJobExecutionResult().get();
      return null;
    }
    while (KeptIds.LAST_ID.get() < stopAfter) {
      Thread.sleep(5);
    }
    stopping = true;
    return job.stopWithSavepoint(false, dir.toUri().toString(), SavepointFormatType.CANONICAL).get();
  }

  @Test
  void rescaledRunsKeepWhatTheLibraryKeeps() throws Exception {
    final Path dir = Files.createDirectories(Path.of(Records.property("bulkbloom.test.scratch")));
    final TreeSet<Long> expected = Records.libraryKept(Records.SHARDS, true);
    final String first = run(1, null, 6_000, dir.resolve("savepoints"));
    final long afterFirst = KeptIds.LAST_ID.get();
    final String second = run(3, first, 13_000, dir.resolve("savepoints"));
    final long afterSecond = KeptIds.LAST_ID.get();
    run(2, second, -1, dir.resolve("savepoints"));
    assertTrue(
        afterFirst < Records.COUNT - 1 && afterSecond < Records.COUNT - 1,
        "a run reached the end of the input before its savepoint (" + afterFirst + ", "
            + afterSecond + "): nothing was rescaled");
    final TreeSet<Long> kept = new TreeSet<>(KeptIds.KEPT);
    assertTrue(
        kept.size() == KeptIds.KEPT.size(), "a record was kept twice across the savepoints");
    Records.checkSame(expected, kept, "parallelism 1 -> 3 -> 2 against the library's shards");
  }
}
