package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.Random;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * The operator's keyed state across failures: checkpoints every 50 ms, a window that rotates every
 * 2000 records (about 16 checkpoints) and whose open part (4 KiB a shard) takes a fold's worth of
 * log in several, so that parts are sealed, logs appended and bases folded all along; failures
 * injected at random records, each after a checkpoint completed since the one before. Besides
 * Records' keys, every fourth record's key comes twice, 400 records apart, so that a restore that
 * lost a log lets the second copy through. The records kept
 * equal the command line's. On RocksDB with incremental checkpoints at parallelism 2, and on the
 * hashmap backend at 3. Properties: bulkbloom.test.cli, the bulkbloom executable;
 * bulkbloom.test.scratch, a scratch folder; optionally bulkbloom.test.seed, the random seed.
 */
public final class StateFailoverTest {
  private static final int FAILURES = 3;
  private static final Duration WINDOW = Duration.ofSeconds(600);
  private static final long CAPACITY = 40_000;
  private static final double FPR = 0.001;
  private static final AtomicLong COMPLETED = new AtomicLong();
  private static final AtomicInteger INJECTED = new AtomicInteger();
  private static volatile long completedAtFailure;
  private static volatile long[] failAt;

  static String keyOf(long id) {
    return id % 4 != 3 ? Records.record(id).f0 : "p" + (id % 800 < 400 ? id : id - 400);
  }

  /** Fails at the next of failAt's ids once a checkpoint completed since the last failure. */
  static final class FailAt
      implements MapFunction<Tuple3<String, Long, Long>, Long>, CheckpointListener {
    private static final long serialVersionUID = 1L;

    @Override
    public Long map(Tuple3<String, Long, Long> r) {
      final int next = INJECTED.get();
      if (next < failAt.length && r.f2 >= failAt[next] && COMPLETED.get() > completedAtFailure) {
        completedAtFailure = COMPLETED.get();
        INJECTED.incrementAndGet();
        throw new IllegalStateException("injected failure " + next + " at record " + r.f2);
      }
      return r.f2;
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) {
      COMPLETED.incrementAndGet();
    }
  }

  private static TreeSet<Long> run(String backend, int parallelism, Path checkpoints)
      throws Exception {
    INJECTED.set(0);
    completedAtFailure = COMPLETED.get();
    final Configuration conf = Records.failoverConfig(backend, checkpoints, FAILURES + 1);
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(parallelism);
    final TreeSet<Long> kept = new TreeSet<>();
    try (CloseableIterator<Long> ids =
        Records.dedup(r -> keyOf(r.f2), WINDOW, CAPACITY, FPR)
            .apply(Records.source(env, 2_500))
            .map(new FailAt())
            .executeAndCollect(backend + " with failures")) {
      ids.forEachRemaining(kept::add);
    }
    assertTrue(
        INJECTED.get() == FAILURES,
        backend + ": " + INJECTED.get() + " of " + FAILURES + " failures injected at "
            + Arrays.toString(failAt) + ": too few checkpoints completed");
    return kept;
  }

  @Test
  void failuresAtRandomRecords() throws Exception {
    final Path dir = Files.createDirectories(Path.of(Records.property("bulkbloom.test.scratch")));
    final long seed = Records.seed();
    final Random random = new Random(seed);
    final TreeSet<Long> expected =
        Records.cliKept(
            Records.property("bulkbloom.test.cli"), dir, StateFailoverTest::keyOf, WINDOW,
            CAPACITY, FPR);
    for (String backend : new String[] {"rocksdb", "hashmap"}) {
      final long[] at = new long[FAILURES];
      for (int i = 0; i < FAILURES; ++i) {
        at[i] = 1_000 + random.nextInt(Records.COUNT - 3_000);
      }
      Arrays.sort(at);
      failAt = at;
      final TreeSet<Long> kept =
          run(backend, backend.equals("rocksdb") ? 2 : 3, dir.resolve("checkpoints-" + backend));
      Records.checkSame(
          expected, kept, backend + ": failures at " + Arrays.toString(at) + " (seed " + seed
              + ") against the command line");
    }
    assertTrue(
        NativeWindowShards.liveInstances() == 0,
        NativeWindowShards.liveInstances() + " window shard sets still hold native memory");
  }
}
