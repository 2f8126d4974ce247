package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.TreeSet;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.bulkbloom.flink.BloomDedup;
import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * Checkpoints, a failure injected after one completed, and the restore from it give exactly the
 * records an uninterrupted run keeps (long keys, parallelism 2, exactly-once collection).
 */
public final class FailoverTest {
  private static volatile boolean checkpointed;
  private static volatile boolean failed;

  /** Fails once, after a checkpoint completed, when a record past id 8000 comes through. */
  static final class FailOnce
      implements MapFunction<Tuple3<String, Long, Long>, Long>, CheckpointListener {
    private static final long serialVersionUID = 1L;
    private final boolean inject;

    FailOnce(boolean inject) {
      this.inject = inject;
    }

    @Override
    public Long map(Tuple3<String, Long, Long> r) {
      if (inject && checkpointed && !failed && r.f2 >= 8000) {
        failed = true;
        throw new IllegalStateException("injected failure at record " + r.f2);
      }
      return r.f2;
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) {
      checkpointed = true;
    }
  }

  static long longKey(Tuple3<String, Long, Long> r) {
    final long j = r.f2 / 4;
    return r.f2 % 4 == 0 ? j * 37 % 200 : r.f2 % 4 == 1 ? 1_000 + j * 13 % 450 : 1_000_000 + r.f2;
  }

  private static TreeSet<Long> run(boolean inject) throws Exception {
    final Configuration conf = new Configuration();
    conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(100));
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
    conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 2);
    conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(10));
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(2);
    final BloomDedup<Tuple3<String, Long, Long>> dedup =
        BloomDedup.<Tuple3<String, Long, Long>>byLong(FailoverTest::longKey)
            .window(Records.WINDOW)
            .clockUnit(Duration.ofSeconds(1))
            .generations(Records.GENERATIONS)
            .capacity(Records.CAPACITY)
            .fpr(Records.FPR)
            .shards(Records.SHARDS)
            .batchSize(64);
    final TreeSet<Long> kept = new TreeSet<>();
    try (CloseableIterator<Long> ids =
        dedup
            .apply(Records.source(env, 10_000))
            .map(new FailOnce(inject))
            .executeAndCollect(inject ? "failover" : "uninterrupted")) {
      ids.forEachRemaining(kept::add);
    }
    return kept;
  }

  @Test
  void restoresExactly() throws Exception {
    final TreeSet<Long> expected = run(false);
    final TreeSet<Long> kept = run(true);
    assertTrue(failed, "no failure was injected: no checkpoint completed before record 8000");
    Records.checkSame(expected, kept, "restored after a failure against the uninterrupted run");
    // Every task, finished or cancelled by the failure, closed its window shards.
    assertTrue(
        NativeWindowShards.liveInstances() == 0,
        NativeWindowShards.liveInstances() + " window shard sets still hold native memory");
  }
}
