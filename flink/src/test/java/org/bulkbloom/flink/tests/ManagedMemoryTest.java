package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.ExceptionUtils;
import org.bulkbloom.flink.BloomDedup;
import org.junit.jupiter.api.Test;

/**
 * The window is Flink's managed memory: at parallelism 2 on one TaskManager of two slots, a window
 * whose half is more than a slot's managed memory fails at start with a message naming both sizes;
 * with enough managed memory the same job runs, and keeps at least as many records as the small
 * window of the other tests (it makes fewer false drops).
 */
public final class ManagedMemoryTest {
  private static TreeSet<Long> run(BloomDedup<Tuple3<String, Long, Long>> dedup, long managed)
      throws Exception {
    final Configuration conf = new Configuration();
    conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, new MemorySize(managed));
    conf.set(TaskManagerOptions.NUM_TASK_SLOTS, 2);
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(2);
    final TreeSet<Long> kept = new TreeSet<>();
    try (CloseableIterator<Long> ids =
        dedup.apply(Records.source(env, 0)).map(r -> r.f2).executeAndCollect("managed")) {
      ids.forEachRemaining(kept::add);
    }
    return kept;
  }

  @Test
  void windowIsManagedMemory() throws Exception {
    // About 24 MiB: 50 million records a window at 0.05.
    final BloomDedup<Tuple3<String, Long, Long>> big = Records.dedup().capacity(50_000_000L);
    final long window = big.sizing().memoryBytes;
    assertTrue(window > (16L << 20), "the test's window is only " + window + " bytes");

    // Each slot gets half of the TaskManager's managed memory, each subtask holds half the window.
    try {
      run(big, window / 2);
      fail("a window of " + window + " bytes ran in " + window / 2);
    } catch (Exception e) {
      final String message =
          ExceptionUtils.findThrowableWithMessage(e, "bytes of managed memory")
              .map(Throwable::getMessage)
              .orElseGet(() -> fail("no managed-memory message in " + e, e));
      System.out.println("refused: " + message);
      final Matcher sizes =
          Pattern.compile(
                  "(\\d+) bytes of managed memory, but its share of the slot's managed memory is"
                      + " (\\d+) bytes")
              .matcher(message);
      assertTrue(sizes.find(), "the message should name both sizes: " + message);
      // Half the shards hold half the blocks, give or take a shard's rounding; a slot's share is
      // at most half the TaskManager's (Flink rounds it down to whole pages).
      final long needed = Long.parseLong(sizes.group(1));
      final long granted = Long.parseLong(sizes.group(2));
      assertTrue(
          Math.abs(needed - window / 2) < window / 100
              && granted <= window / 4
              && granted > window / 4 - (1 << 20),
          "expected about " + window / 2 + " bytes needed and " + window / 4 + " granted: "
              + message);
    }

    final TreeSet<Long> kept = run(big, 2 * window + (64L << 20));
    final TreeSet<Long> small = run(Records.dedup(), 64L << 20);
    assertTrue(
        kept.size() >= small.size() && !small.isEmpty(),
        "the big window dropped records the small one kept: " + kept.size() + " vs "
            + small.size());
    System.out.println(
        "with " + (2 * window + (64L << 20)) + " bytes of managed memory: " + kept.size()
            + " kept");
  }
}
