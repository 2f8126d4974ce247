package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.TreeSet;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.bulkbloom.flink.BloomDedup;
import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * A day that brings ten times the keys of the first keeps the promise (issue 33): day 1 brings
 * 30,000 unique keys over 24 h, day 2 300,000 new ones over the next 24 h, and every 20th record
 * of day 2 repeats the key 100 records before it. A 36 h window at 0.1 % sized for day 1's rate
 * (capacity 45,000 records per 36 h), 16 shards at parallelism 2, keeps at least 99.7 % of day 2's
 * unique records and drops every repeat, and its decisions are exactly those of the library's 16
 * window shards on the same stream. Fixed-size shards (the library's, on the same stream) lose far
 * more: the test shows the difference.
 *
 * <p>Growth stays within the managed memory: the library's shards given a generation budget never
 * hold more than G budgets each, and count the growths they refuse; the operator on a TaskManager
 * with too little managed memory for day 2 runs to the end, counting capped and overfull
 * generations, and still drops every repeat.
 */
public final class TenfoldDayTest {
  private static final int DAY1 = 30_000;
  private static final int DAY2 = 300_000;
  // Day 2's records: its keys, and after every 19 of them a repeat.
  private static final int DAY2_RECORDS = DAY2 + DAY2 / 19;
  private static final int COUNT = DAY1 + DAY2_RECORDS;
  private static final long DAY = 86_400;
  private static final int SHARDS = 16;
  private static final long CAPACITY = DAY1 * 3 / 2;
  private static final double FPR = 0.001;

  /** Whether record i repeats the key of a record before it. */
  static boolean isRepeat(long i) {
    return i >= DAY1 && (i - DAY1) % 20 == 19;
  }

  /** Record i: (unused, event time in seconds, id = i) with key {@link #key}. */
  static long key(long i) {
    if (i < DAY1) {
      return i;
    }
    final long j = i - DAY1;
    // The 19 new keys of each group of 20 records; a repeat takes the key 100 records before.
    return isRepeat(i) ? key(i - 100) : DAY1 + j / 20 * 19 + j % 20;
  }

  static long time(long i) {
    return i < DAY1 ? i * DAY / DAY1 : DAY + (i - DAY1) * DAY / DAY2_RECORDS;
  }

  static Tuple3<Long, Long, Long> record(long i) {
    return Tuple3.of(key(i), time(i), i);
  }

  @Test
  void tenfoldDayKeepsThePromise() throws Exception {
    final long[] keys = new long[COUNT];
    final long[] times = new long[COUNT];
    for (int i = 0; i < COUNT; ++i) {
      keys[i] = key(i);
      times[i] = time(i);
    }
    final long window = Duration.ofHours(36).toSeconds();
    final TreeSet<Long> library =
        LibraryReference.keptLongs(
            new LibraryReference.Window(window, 4, FPR, CAPACITY, 0, SHARDS, true, 0), keys, times);
    final TreeSet<Long> fixed =
        LibraryReference.keptLongs(
            new LibraryReference.Window(window, 4, FPR, CAPACITY, 0, SHARDS, false, 0), keys, times);

    final TreeSet<Long> kept = run(new Configuration());
    System.out.println(
        "day 2 unique records kept: operator " + keptOfDay2(kept) + ", library's sized shards "
            + keptOfDay2(library) + ", fixed-size shards " + keptOfDay2(fixed) + " of " + DAY2);
    checkRepeatsDropped(kept);
    assertTrue(
        keptOfDay2(kept) >= DAY2 * 997L / 1000,
        "the operator kept " + keptOfDay2(kept) + " of day 2's " + DAY2
            + " unique records, under 99.7 %");
    Records.checkSame(library, kept, "the tenfold day against the library's sized shards", COUNT);
    assertTrue(
        keptOfDay2(fixed) < DAY2 * 99L / 100,
        "fixed-size shards kept " + keptOfDay2(fixed) + " of day 2's " + DAY2
            + ": the stream should overfill them");

    // A budget of twice the configured generation's bytes per generation and shard: day 2 wants
    // about ten times them.
    final long budget = 2 * NativeWindowShards.size(window, 0, 4, FPR, CAPACITY, 0, SHARDS, true)
        .memoryBytes / 4 / SHARDS;
    final LibraryReference.Run bounded =
        LibraryReference.runLongs(
            new LibraryReference.Window(window, 4, FPR, CAPACITY, 0, SHARDS, true, budget),
            keys,
            times);
    System.out.println(
        "with " + budget + " bytes a generation and shard: peak " + bounded.peakBytes()
            + " bytes, " + bounded.capped() + " capped and " + bounded.overfull()
            + " overfull generations, day 2 kept " + keptOfDay2(bounded.kept()));
    assertTrue(
        bounded.peakBytes() <= 4 * budget * SHARDS,
        "the shards held " + bounded.peakBytes() + " bytes, over 4 x " + budget + " x " + SHARDS);
    assertTrue(
        bounded.capped() > 0 && bounded.overfull() > 0,
        "a budget of " + budget + " bytes should cap day 2's generations");
    checkRepeatsDropped(bounded.kept());

    // The operator's budget is its share of managed memory: 1 MiB for both subtasks, far less
    // than the ~2.5 MiB day 2 asks.
    final Configuration small = new Configuration();
    small.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.ofMebiBytes(1));
    small.set(TaskManagerOptions.NUM_TASK_SLOTS, 2);
    CountingReporter.enable(small);
    final TreeSet<Long> keptSmall = run(small);
    System.out.println(
        "with 1 MiB of managed memory: " + CountingReporter.sum("cappedGenerations") + " capped, "
            + CountingReporter.sum("overfullGenerations") + " overfull generations, day 2 kept "
            + keptOfDay2(keptSmall));
    assertTrue(
        CountingReporter.sum("cappedGenerations") > 0
            && CountingReporter.sum("overfullGenerations") > 0,
        "1 MiB of managed memory should cap day 2's generations");
    checkRepeatsDropped(keptSmall);
  }

  private static void checkRepeatsDropped(TreeSet<Long> kept) {
    for (long id : kept) {
      assertTrue(!isRepeat(id), "record " + id + " repeats a key 100 records before, but passed");
    }
  }

  /** The operator's kept ids at parallelism 2 on a MiniCluster configured by {@code conf}. */
  private static TreeSet<Long> run(Configuration conf) throws Exception {
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(2);
    final DataGeneratorSource<Tuple3<Long, Long, Long>> generator =
        new DataGeneratorSource<>(
            TenfoldDayTest::record,
            COUNT,
            RateLimiterStrategy.noOp(),
            Types.TUPLE(Types.LONG, Types.LONG, Types.LONG));
    final TreeSet<Long> kept = new TreeSet<>();
    try (CloseableIterator<Long> ids =
        BloomDedup.<Tuple3<Long, Long, Long>>byLong(r -> r.f0)
            .window(Duration.ofHours(36))
            .clockUnit(Duration.ofSeconds(1))
            .capacity(CAPACITY)
            .fpr(FPR)
            .shards(SHARDS)
            .apply(
                env.fromSource(
                        generator,
                        WatermarkStrategy.<Tuple3<Long, Long, Long>>forMonotonousTimestamps()
                            .withTimestampAssigner((r, previous) -> r.f1 * 1000),
                        "days")
                    .setParallelism(1))
            .map(r -> r.f2)
            .executeAndCollect("tenfold day")) {
      ids.forEachRemaining(kept::add);
    }
    return kept;
  }

  private static long keptOfDay2(TreeSet<Long> ids) {
    return ids.tailSet((long) DAY1).stream().filter(id -> !isRepeat(id)).count();
  }
}
