package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.Random;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.checkpoint.CheckpointException;
import org.apache.flink.runtime.checkpoint.CheckpointFailureReason;
import org.apache.flink.runtime.state.StateSnapshotContext;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.util.CloseableIterator;
import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * Checkpoints that fail after the dedup operator's snapshotState ran: its snapshot was taken and
 * the final logs of the parts sealed since handed over, but the checkpoint never completes. The
 * next completed checkpoint must carry all of it, or a restore from it loses keys.
 *
 * <p>Behind the dedup operator, an operator at parallelism 1 fails checkpoints from its
 * snapshotState: one in two (a seeded hash of the checkpoint id, so that runs of failures are of
 * any length) and every one during which the window rotated (judged by the times of the records
 * and watermarks that reach it). It declines them to the checkpoint coordinator, which aborts them
 * (every task gets notifyCheckpointAborted), except the third of a run, which expires: its
 * snapshotState holds past the checkpoint timeout, aborted with no task declining. Aligned
 * barriers reach it only after every dedup subtask passed the barrier on, which a subtask does just
 * before its snapshotState in the same call, so every dedup subtask's snapshot of a failed
 * checkpoint ran. The window is StateFailoverTest's (a period of 2000 records) with half its
 * capacity, so that a shard's part (2 KiB) takes a fold's worth of log within a period: bases of
 * open and sealed parts are folded (about 20 a run; each fold in one checkpoint, as a part this
 * small is within one checkpoint's budget), in failed checkpoints too. Every fourth record's key
 * comes twice, half a window apart. Task failures are injected past random records, each just
 * after a checkpoint completed that directly followed failed ones, so that every restore is from a
 * checkpoint taken after failed ones. The records kept equal the command line's. RocksDB with
 * incremental checkpoints at parallelism 2 (the files a failed checkpoint uploaded are never
 * confirmed), the hashmap backend at 3. Properties: bulkbloom.test.cli, the bulkbloom executable;
 * bulkbloom.test.scratch, a scratch folder; optionally bulkbloom.test.seed, the random seed.
 */
public final class FailedCheckpointTest {
  private static final int FAILURES = 3;
  private static final Duration WINDOW = Duration.ofSeconds(600);
  // The window's period in seconds: ceil(T / (G - 1)) (docs/WINDOW.md).
  private static final long PERIOD_SECONDS = WINDOW.toSeconds() / (Records.GENERATIONS - 1);
  private static final long CAPACITY = 20_000;
  private static final double FPR = 0.001;
  private static final Duration TIMEOUT = Duration.ofSeconds(2);
  // The failed checkpoint of a run (counted from 1) that expires instead of being declined: one,
  // since it holds the job for the timeout.
  private static final int EXPIRING = 3;

  private static volatile long seed;
  private static volatile long[] failAt;
  private static final AtomicInteger INJECTED = new AtomicInteger();
  private static final AtomicInteger DECLINED = new AtomicInteger();
  private static final AtomicInteger EXPIRED = new AtomicInteger();
  private static final AtomicInteger ABORTED = new AtomicInteger();
  private static final AtomicInteger COMPLETED = new AtomicInteger();
  // Failed checkpoints during which the records and watermarks passed into a later period.
  private static final AtomicInteger FAILED_ACROSS_ROTATION = new AtomicInteger();
  // The checkpoints this operator let through, with whether the one it saw before failed; and
  // whether the latest that completed followed a failed one. The restore of a task failure injected
  // while armed is from a checkpoint just after failed ones, with the records whose keys those
  // carried still to repeat (folds soon write a part's bits anew, which would mend a lost log).
  private static final Map<Long, Boolean> FOLLOWS_FAILED = new ConcurrentHashMap<>();
  private static volatile boolean armed;

  /**
   * Records' keys, but every fourth record's key comes twice, 3000 records (300 s: half the window,
   * across a rotation) apart, so that a restore whose state lost a log of the first copy (of the
   * open part or of a sealed one) lets the second copy through, whenever it was restored.
   */
  static String keyOf(long id) {
    return id % 4 != 3 ? Records.record(id).f0 : "p" + (id % 6000 < 3000 ? id : id - 3000);
  }

  /** Whether checkpoint {@code id} fails: one in two, by a hash of the seed and the id. */
  static boolean fails(long id) {
    return new Random(seed ^ (id * 0x9E3779B97F4A7C15L)).nextBoolean();
  }

  /**
   * Passes the ids on, fails checkpoints after the operators before it took their snapshots: those
   * {@link #fails} chooses and those during which the window rotated. Fails the task at the next of
   * failAt's records once it is armed.
   */
  static final class FailCheckpoints extends AbstractStreamOperator<Long>
      implements OneInputStreamOperator<Tuple3<String, Long, Long>, Long> {
    private static final long serialVersionUID = 1L;
    // The latest period of the records and watermarks that came through, and its value at the
    // previous checkpoint. A dedup subtask's clock is at least the time of each record it passed on
    // before a barrier and of each watermark, so when this period moves between two checkpoints a
    // dedup subtask sealed a part at about the later one (give or take the records it dropped).
    private transient long period;
    private transient long periodAtLastCheckpoint;
    private transient boolean lastFailed;

    @Override
    public void open() throws Exception {
      super.open();
      period = Long.MIN_VALUE;
      periodAtLastCheckpoint = Long.MIN_VALUE;
      lastFailed = false;
    }

    @Override
    public void processElement(StreamRecord<Tuple3<String, Long, Long>> record) {
      final long id = record.getValue().f2;
      final int next = INJECTED.get();
      if (armed && next < failAt.length && id >= failAt[next]) {
        armed = false;
        INJECTED.incrementAndGet();
        throw new IllegalStateException("injected failure " + next + " at record " + id);
      }
      period = Math.max(period, Math.floorDiv(record.getValue().f1, PERIOD_SECONDS));
      output.collect(new StreamRecord<>(id));
    }

    @Override
    public void processWatermark(Watermark mark) throws Exception {
      if (mark.getTimestamp() != Long.MAX_VALUE) {
        period = Math.max(period, Math.floorDiv(mark.getTimestamp(), 1000 * PERIOD_SECONDS));
      }
      super.processWatermark(mark);
    }

    @Override
    public void snapshotState(StateSnapshotContext context) throws Exception {
      super.snapshotState(context);
      final long id = context.getCheckpointId();
      final boolean rotated =
          periodAtLastCheckpoint != Long.MIN_VALUE && period > periodAtLastCheckpoint;
      periodAtLastCheckpoint = period;
      if (!rotated && !fails(id)) {
        FOLLOWS_FAILED.put(id, lastFailed);
        lastFailed = false;
        return;
      }
      lastFailed = true;
      if (rotated) {
        FAILED_ACROSS_ROTATION.incrementAndGet();
      }
      final int failed = DECLINED.get() + EXPIRED.get() + 1;
      if (failed == EXPIRING) {
        EXPIRED.incrementAndGet();
        Thread.sleep(TIMEOUT.toMillis() + 300);
      } else {
        DECLINED.incrementAndGet();
        getContainingTask()
            .getEnvironment()
            .declineCheckpoint(
                id,
                new CheckpointException(
                    "declined by the test", CheckpointFailureReason.CHECKPOINT_DECLINED));
      }
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) throws Exception {
      super.notifyCheckpointComplete(checkpointId);
      COMPLETED.incrementAndGet();
      armed = Boolean.TRUE.equals(FOLLOWS_FAILED.remove(checkpointId));
    }

    @Override
    public void notifyCheckpointAborted(long checkpointId) throws Exception {
      super.notifyCheckpointAborted(checkpointId);
      ABORTED.incrementAndGet();
    }
  }

  private static TreeSet<Long> run(String backend, int parallelism, Path checkpoints)
      throws Exception {
    INJECTED.set(0);
    DECLINED.set(0);
    EXPIRED.set(0);
    ABORTED.set(0);
    COMPLETED.set(0);
    FAILED_ACROSS_ROTATION.set(0);
    FOLLOWS_FAILED.clear();
    armed = false;
    final Configuration conf = Records.failoverConfig(backend, checkpoints, FAILURES + 1);
    conf.set(CheckpointingOptions.CHECKPOINTING_TIMEOUT, TIMEOUT);
    conf.set(CheckpointingOptions.TOLERABLE_FAILURE_NUMBER, Integer.MAX_VALUE);
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(parallelism);
    final TreeSet<Long> kept = new TreeSet<>();
    try (CloseableIterator<Long> ids =
        Records.dedup(r -> keyOf(r.f2), WINDOW, CAPACITY, FPR)
            .apply(Records.source(env, 2_000))
            .transform("fail checkpoints", Types.LONG, new FailCheckpoints())
            .setParallelism(1)
            .executeAndCollect(backend + " with failed checkpoints")) {
      ids.forEachRemaining(kept::add);
    }
    final String counts =
        backend + ": " + INJECTED.get() + " of " + FAILURES + " task failures injected at "
            + Arrays.toString(failAt) + "; checkpoints " + DECLINED.get() + " declined, "
            + EXPIRED.get() + " expired, " + FAILED_ACROSS_ROTATION.get()
            + " of them across a rotation, " + ABORTED.get() + " abort notifications, "
            + COMPLETED.get() + " completed";
    System.out.println(counts);
    assertTrue(INJECTED.get() == FAILURES, counts + ": too few checkpoints completed");
    assertTrue(
        EXPIRED.get() > 0 && FAILED_ACROSS_ROTATION.get() > 0 && ABORTED.get() > 0,
        counts + ": too few checkpoints failed");
    return kept;
  }

  @Test
  void failedCheckpointsLoseNothing() throws Exception {
    final Path dir = Files.createDirectories(Path.of(Records.property("bulkbloom.test.scratch")));
    seed = Records.seed();
    final Random random = new Random(seed);
    final TreeSet<Long> expected =
        Records.cliKept(
            Records.property("bulkbloom.test.cli"), dir, FailedCheckpointTest::keyOf, WINDOW,
            CAPACITY, FPR);
    for (String backend : new String[] {"rocksdb", "hashmap"}) {
      final long[] at = new long[FAILURES];
      // One in each of FAILURES stretches of records 1500 to 12000, so that checkpoints fail and
      // complete between them and after the last, even on a loaded machine (RocksDB's checkpoints
      // then come every 400 ms, with 2000 records a second).
      final int stretch = 10_500 / FAILURES;
      for (int i = 0; i < FAILURES; ++i) {
        at[i] = 1_500 + i * stretch + random.nextInt(stretch);
      }
      failAt = at;
      final TreeSet<Long> kept =
          run(backend, backend.equals("rocksdb") ? 2 : 3, dir.resolve("checkpoints-" + backend));
      Records.checkSame(
          expected, kept, backend + ": failed checkpoints, task failures at "
              + Arrays.toString(at) + " (seed " + seed + ") against the command line");
    }
    assertTrue(
        NativeWindowShards.liveInstances() == 0,
        NativeWindowShards.liveInstances() + " window shard sets still hold native memory");
  }
}
