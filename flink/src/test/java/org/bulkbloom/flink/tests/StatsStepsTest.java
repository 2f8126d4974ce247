package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.bulkbloom.flink.BloomDedup;
import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * The operator's gauges are read a few shards a flush from the start: opening it reads no shard,
 * so the first record waits for no reading, and the gauges say "not yet read" (NaN) until the
 * first reading ends; then they hold what one reading of the whole window at once gives.
 *
 * <p>The input: {@link #DISTINCT} distinct long keys, then {@link #REPEAT_BATCHES} batches of
 * their repeats, all at one time, one batch a flush (no watermark before the end, no timer). The
 * first flush inserts every key; the repeats change no bit, so the reading that starts there and
 * takes one shard a flush (each is larger than a step) reads the final window, as the reference
 * reads it at once.
 */
public final class StatsStepsTest {
  private static final int DISTINCT = 20_000;
  private static final int REPEAT_BATCHES = 6;
  private static final int SHARDS = 4;
  private static final int GENERATIONS = 4;
  private static final long WINDOW_SECONDS = 120;
  private static final long CAPACITY = 10_000_000;
  private static final double FPR = 0.01;
  // What a step reads at least (BloomDedupOperator.STATS_STEP_BYTES).
  private static final long STEP_BYTES = 4L << 20;

  // What the operator's first output record saw, in the task (same JVM): the shards the stats
  // readings of this process had read, and the fill gauge.
  private static final AtomicLong shardsReadAtFirst = new AtomicLong(-1);
  private static final AtomicReference<Object> fillAtFirst = new AtomicReference<>();
  private static final AtomicReference<Object> fprAtFirst = new AtomicReference<>();

  /** Passes records on; notes what the first one saw. Chained after the operator, in its flush. */
  private static final class FirstRecordProbe implements MapFunction<Long, Long> {
    @Override
    public Long map(Long key) {
      if (shardsReadAtFirst.get() < 0) {
        shardsReadAtFirst.set(NativeWindowShards.shardsReadForStats());
        fillAtFirst.set(CountingReporter.gauge("fill"));
        fprAtFirst.set(CountingReporter.gauge("currentFpr"));
      }
      return key;
    }
  }

  private static long keyOf(long i) {
    return (i % DISTINCT) * 0x9E3779B97F4A7C15L;
  }

  @Test
  void gaugesAreReadInStepsFromTheFirstFlush() throws Exception {
    final NativeWindowShards.Sizing sizing =
        NativeWindowShards.size(WINDOW_SECONDS, 0, GENERATIONS, FPR, CAPACITY, 0, SHARDS, false);
    assertTrue(
        sizing.memoryBytes / SHARDS > STEP_BYTES,
        "a shard of " + sizing.memoryBytes / SHARDS + " bytes is read with others in one step");

    final Configuration conf = new Configuration();
    CountingReporter.enable(conf);
    conf.set(
        TaskManagerOptions.MANAGED_MEMORY_SIZE, new MemorySize(sizing.memoryBytes + (64L << 20)));
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(1);
    final BloomDedup<Long> dedup =
        BloomDedup.<Long>byLong(k -> k)
            .window(Duration.ofSeconds(WINDOW_SECONDS))
            .clockUnit(Duration.ofSeconds(1))
            .generations(GENERATIONS)
            .capacity(CAPACITY)
            .fpr(FPR)
            .fixedSizeShards()
            .shards(SHARDS)
            .batchSize(DISTINCT)
            .flushInterval(Duration.ofHours(1));
    final long before = NativeWindowShards.shardsReadForStats();
    long kept = 0;
    try (CloseableIterator<Long> out =
        dedup
            .apply(
                env.fromSource(
                        new DataGeneratorSource<>(
                            StatsStepsTest::keyOf,
                            (long) DISTINCT * (1 + REPEAT_BATCHES),
                            RateLimiterStrategy.noOp(),
                            Types.LONG),
                        WatermarkStrategy.<Long>noWatermarks()
                            .withTimestampAssigner((key, previous) -> 1_000L),
                        "keys")
                    .setParallelism(1))
            .map(new FirstRecordProbe())
            .executeAndCollect("stats-steps")) {
      while (out.hasNext()) {
        out.next();
        ++kept;
      }
    }
    final long read = NativeWindowShards.shardsReadForStats() - before;
    System.out.println(
        "kept " + kept + "; shards read before the first record "
            + (shardsReadAtFirst.get() - before) + ", in all " + read);
    assertEquals(0, shardsReadAtFirst.get() - before, "shards read before the first record");
    assertTrue(
        Double.isNaN((Double) fillAtFirst.get()) && Double.isNaN((Double) fprAtFirst.get()),
        "fill " + fillAtFirst.get() + " and currentFpr " + fprAtFirst.get()
            + " before the first reading ended, not NaN");
    assertTrue(read >= SHARDS, "only " + read + " shards of " + SHARDS + " were read");

    // The same window in this process, read at once.
    try (NativeWindowShards reference =
        new NativeWindowShards(
            WINDOW_SECONDS, 0, GENERATIONS, FPR, CAPACITY, 0, SHARDS, false, 0)) {
      for (int s = 0; s < SHARDS; ++s) {
        reference.addEmpty(s);
      }
      final long[] keys = new long[DISTINCT];
      final long[] clocks = new long[DISTINCT];
      for (int i = 0; i < DISTINCT; ++i) {
        keys[i] = keyOf(i);
        clocks[i] = 1;
      }
      final int fresh =
          reference.dedup(keys, reference.shardOf(keys), clocks, DISTINCT, new byte[DISTINCT]);
      reference.advanceTo(1);
      assertEquals(fresh, kept, "records kept");
      final double[] whole = reference.stats();
      assertTrue(whole[3] > 0, "the reference window holds nothing");
      assertEquals((long) whole[0], CountingReporter.gauge("stateBytes"), "stateBytes");
      assertEquals(whole[3], CountingReporter.gauge("fill"), "fill");
      assertEquals(whole[2], CountingReporter.gauge("currentFpr"), "currentFpr");
    }
  }
}
