package org.bulkbloom.flink;

import java.io.DataInputStream;
import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.Arrays;
import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.core.memory.ManagedMemoryUseCase;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.memory.MemoryManager;
import org.apache.flink.runtime.memory.MemoryReservationException;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.runtime.state.KeyGroupStatePartitionStreamProvider;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.runtime.state.StateSnapshotContext;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.BoundedOneInput;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.util.OutputTag;
import org.bulkbloom.jni.NativeWindowShards;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The operator behind {@link BloomDedup}: buffers records, dedups each batch with one native call
 * over the shards this subtask holds, and emits the new ones in arrival order.
 *
 * <p>A batch is flushed when full, on a processing-time timer, before each watermark is passed
 * on, before each checkpoint barrier and at the end of input, so a checkpoint never holds a
 * record in flight. Its state is in Flink's keyed state, shard s under the key of key group s
 * ({@link ShardStates}: each part a base plus the logs of the checkpoints since, bases folded a few
 * chunks a checkpoint);
 * checkpoints of earlier versions, each shard's window file as raw keyed state, still restore.
 *
 * <p>On event time, records without a timestamp, too far in the future or too late are refused
 * before they reach a batch (see {@link BloomDedup}): emitted on the side output at once, they
 * never touch the window or the clock.
 */
final class BloomDedupOperator<T> extends AbstractStreamOperator<T>
    implements OneInputStreamOperator<T, T>, BoundedOneInput, ProcessingTimeCallback {
  private static final long serialVersionUID = 1L;
  // Hides AbstractStreamOperator's LOG, which logs under Flink's class name: a user's logger for
  // org.bulkbloom.flink must see these lines.
  private static final Logger LOG = LoggerFactory.getLogger(BloomDedupOperator.class);
  // How often at most the metrics read every bit of the held shards, on the task thread: every
  // 10 s, and no sooner than STATS_COST_FACTOR times the last reading took, so that the gauges
  // cost at most 1 % of the task's time (a 1.4 GiB window takes over a second to read). A reading
  // is taken STATS_STEP_BYTES of shards (one shard at least) a flush, so that no flush stalls the
  // sink for the whole window's read (840 ms of CPU a GiB, bench/RESULTS.md "Flink"); the first
  // starts at the first flush, so that open() does not hold the first record for it either.
  private static final long STATS_INTERVAL_MS = 10_000;
  private static final long STATS_COST_FACTOR = 100;
  private static final long STATS_STEP_BYTES = 4L << 20;

  private final BloomDedup<T> spec;
  private final ShardRouting routing;
  private final OutputTag<Refused<T>> refusedTag;

  private transient NativeWindowShards window;
  private transient ShardStates states;
  // The key groups, that is the shards, this subtask holds.
  private transient KeyGroupRange held;
  private transient long unitMs;
  private transient long latenessUnits;
  private transient long maxFutureMs;
  // The subtask's clock: the largest time (in clock units) of its accepted records and of its
  // watermarks within the future bound.
  private transient long clock;
  private transient int size;
  private transient Object[] values;
  private transient long[] timestamps;
  private transient boolean[] hasTimestamp;
  private transient long[] longKeys;
  private transient byte[] blob;
  private transient int blobEnd;
  private transient int[] ends;
  private transient int[] shards;
  private transient long[] clocks;
  private transient byte[] isNew;
  private transient boolean timerPending;
  private transient StreamRecord<T> reuse;
  private transient long nextStatsMs;
  private transient volatile double[] stats;
  // The reading under way (statsStep) and the task time its steps took so far.
  private transient double[] statsReading;
  private transient long statsReadingNanos;
  private transient Counter kept;
  private transient Counter dropped;
  private transient Counter refused;
  private transient Counter[] refusedFor;
  private transient boolean warnedOfFutureWatermark;
  // Managed memory reserved for the held shards (their bytes), released in close(), and this
  // operator's share of the slot's, which sized shards grow within.
  private transient volatile long reservedBytes;
  private transient long shareBytes;
  private transient Counter overfull;
  private transient Counter capped;
  // The native counts the counters last took (overfull since the shards were loaded; capped
  // since the shard set was made), and whether the log has said why generations stop growing.
  private transient long overfullSeen;
  private transient long cappedSeen;
  private transient boolean warnedOfCap;
  private transient boolean warnedOfReservation;

  BloomDedupOperator(BloomDedup<T> spec, ShardRouting routing, OutputTag<Refused<T>> refusedTag) {
    this.spec = spec;
    this.routing = routing;
    this.refusedTag = refusedTag;
  }

  // Checkpoints written before the operator kept its state in keyed state hold raw keyed state:
  // each shard's window file. Nothing else may read it as its own (Flink's timers would).
  @Override
  protected boolean isUsingCustomRawKeyedState() {
    return true;
  }

  @Override
  public void initializeState(StateInitializationContext context) throws Exception {
    super.initializeState(context);
    final int maxParallelism = getRuntimeContext().getTaskInfo().getMaxNumberOfParallelSubtasks();
    if (maxParallelism != routing.numShards()) {
      throw new IllegalStateException(
          "bulkbloom: the operator's max parallelism is " + maxParallelism + " but the window has "
              + routing.numShards() + " shards; they must be equal (BloomDedup sets it)");
    }
    unitMs = spec.clockUnit.toMillis();
    latenessUnits = spec.lateness.toMillis() / unitMs;
    // A bound of 2^63 ms or more (ChronoUnit.FOREVER's duration) bounds nothing.
    maxFutureMs =
        spec.maxFuture.compareTo(Duration.ofMillis(Long.MAX_VALUE)) < 0
            ? spec.maxFuture.toMillis()
            : Long.MAX_VALUE;
    window =
        new NativeWindowShards(
            spec.window.toMillis() / unitMs,
            latenessUnits,
            spec.generations,
            spec.fpr,
            spec.capacity,
            spec.seed,
            routing.numShards(),
            spec.sized,
            spec.maxCapacity);
    final KeyGroupRange range =
        KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(
            maxParallelism,
            getRuntimeContext().getTaskInfo().getNumberOfParallelSubtasks(),
            getRuntimeContext().getTaskInfo().getIndexOfThisSubtask());
    held = range;
    reserveManagedMemory(range);
    states = new ShardStates(this, window, routing);
    final boolean[] restored = new boolean[routing.numShards()];
    for (int shard = range.getStartKeyGroup(); shard <= range.getEndKeyGroup(); ++shard) {
      restored[shard] = states.restore(shard);
    }
    // The task thread's CPU time so far is its start with the state backend's restore and these.
    LOG.info(
        "bulkbloom: shards {} to {} restored from keyed state: {}; the task thread's CPU time"
            + " since it started {} ms",
        range.getStartKeyGroup(),
        range.getEndKeyGroup(),
        states.restoreCost(),
        ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime() / 1_000_000);
    for (KeyGroupStatePartitionStreamProvider input : context.getRawKeyedStateInputs()) {
      final int shard = input.getKeyGroupId();
      if (restored[shard]) {
        continue;
      }
      try (InputStream stream = input.getStream()) {
        final DataInputStream in = new DataInputStream(stream);
        final byte[] bytes = new byte[in.readInt()];
        in.readFully(bytes);
        window.load(shard, bytes);
        restored[shard] = true;
      }
    }
    // With periodic checkpoints, log from the start, so that a new shard's first checkpoint writes
    // a log, not its open part (a shard restored from keyed state logs already). Without them
    // the log starts at the first checkpoint or savepoint: it holds 8 bytes per new key.
    final boolean periodic =
        getContainingTask()
            .getEnvironment()
            .getJobConfiguration()
            .getOptional(CheckpointingOptions.CHECKPOINTING_INTERVAL)
            .map(interval -> !interval.isZero() && !interval.isNegative())
            .orElse(false);
    clock = Long.MIN_VALUE;
    for (int shard = range.getStartKeyGroup(); shard <= range.getEndKeyGroup(); ++shard) {
      if (!restored[shard]) {
        window.addEmpty(shard);
      }
      if (periodic) {
        window.enableChangeLog(shard);
        if (!restored[shard]) {
          states.startedEmpty(shard);
        }
      }
    }
    // Every held shard was moved to its subtask's clock before the checkpoint (see flush()).
    clock = window.clock();
    boundGrowth(range);
  }

  /**
   * Sized shards grow within this subtask's share of managed memory: each generation of a held
   * shard (every shard has the same blocks) may take a G-th of the shard's part of the share, so
   * that all of them together never take more (docs/WINDOW.md "Sizing shards"). Then reserves
   * what the held shards hold now: restored shards may be larger than the configured size.
   */
  private void boundGrowth(KeyGroupRange range) {
    final long held = range.getNumberOfKeyGroups();
    window.generationBudget(shareBytes / held / spec.generations);
    overfullSeen = window.sizingStats()[1];
    final long bytes = window.sizingStats()[0];
    if (bytes > shareBytes) {
      throw new IllegalStateException(
          "bulkbloom: subtask " + getRuntimeContext().getTaskInfo().getIndexOfThisSubtask()
              + " restored shards " + range.getStartKeyGroup() + " to " + range.getEndKeyGroup()
              + " of " + routing.numShards() + " holding " + bytes + " bytes, but its share of the"
              + " slot's managed memory is " + shareBytes + " bytes: give the TaskManagers more"
              + " managed memory, or restore at a higher parallelism");
    }
    trackMemory(bytes);
  }

  /**
   * Moves the reservation to the held shards' {@code bytes}. Sized shards stay within the share
   * by their budget, so the slot refuses only when another consumer holds more than its share;
   * the window then runs on, and the log says so once.
   */
  private void trackMemory(long bytes) {
    final MemoryManager memory = getContainingTask().getEnvironment().getMemoryManager();
    if (bytes < reservedBytes) {
      memory.releaseMemory(this, reservedBytes - bytes);
      reservedBytes = bytes;
    } else if (bytes > reservedBytes) {
      try {
        memory.reserveMemory(this, bytes - reservedBytes);
        reservedBytes = bytes;
      } catch (MemoryReservationException e) {
        if (!warnedOfReservation) {
          warnedOfReservation = true;
          LOG.warn(
              "bulkbloom: the window's shards grew to {} bytes, within this operator's share of"
                  + " {} bytes, but the slot's managed memory has only {} bytes left: another"
                  + " consumer of the slot holds more than its share; {} bytes stay reserved",
              bytes,
              shareBytes,
              memory.availableMemory(),
              reservedBytes);
        }
      }
    }
  }

  /** Takes the native sizing counts into the metrics and the reservation after a native call. */
  private void trackSizing() {
    final long[] sizing = window.sizingStats();
    trackMemory(sizing[0]);
    if (sizing[1] > overfullSeen) {
      overfull.inc(sizing[1] - overfullSeen);
      overfullSeen = sizing[1];
    }
    if (sizing[2] > cappedSeen) {
      capped.inc(sizing[2] - cappedSeen);
      cappedSeen = sizing[2];
      if (!warnedOfCap) {
        warnedOfCap = true;
        LOG.warn(
            "bulkbloom: a generation of the window could not grow as its period asks, held by"
                + " maxCapacity ({}) or by this subtask's share of managed memory ({} bytes, of"
                + " which each generation of a held shard may take a {}th of the shard's part);"
                + " while its period brings more keys the window's false-positive rate is past"
                + " the promised {} (metrics cappedGenerations, overfullGenerations, currentFpr):"
                + " give the TaskManagers more managed memory, run at a higher parallelism, or"
                + " raise maxCapacity",
            spec.maxCapacity == 0 ? "none" : spec.maxCapacity,
            shareBytes,
            spec.generations,
            spec.fpr);
      }
    }
  }

  /**
   * Reserves the bytes of the shards in {@code range} from the slot's managed memory, within this
   * operator's share of it, before any is allocated; throws naming both sizes when they do not fit.
   */
  private void reserveManagedMemory(KeyGroupRange range) throws Exception {
    final NativeWindowShards.Sizing sizing = spec.sizing();
    // Shard s holds blocks [floor(s B / S), floor((s + 1) B / S)) of each generation, and every
    // block has the same size, so a range of shards holds its share of the window's bytes.
    final long blocks = sizing.numBlocks;
    final int numShards = routing.numShards();
    final long held =
        (range.getEndKeyGroup() + 1L) * blocks / numShards
            - range.getStartKeyGroup() * blocks / numShards;
    final long bytes = Math.multiplyExact(sizing.memoryBytes / blocks, held);
    final Environment environment = getContainingTask().getEnvironment();
    final MemoryManager memory = environment.getMemoryManager();
    final double fraction =
        getOperatorConfig()
            .getManagedMemoryFractionOperatorUseCaseOfSlot(
                ManagedMemoryUseCase.OPERATOR,
                environment.getJobConfiguration(),
                environment.getTaskManagerInfo().getConfiguration(),
                environment.getUserCodeClassLoader().asClassLoader());
    final long share = memory.computeMemorySize(fraction);
    final String need =
        "bulkbloom: subtask "
            + getRuntimeContext().getTaskInfo().getIndexOfThisSubtask()
            + " holds shards "
            + range.getStartKeyGroup()
            + " to "
            + range.getEndKeyGroup()
            + " of "
            + numShards
            + " of the window ("
            + sizing.description
            + "): "
            + bytes
            + " bytes of managed memory, but ";
    final String fix =
        ": give the TaskManagers more managed memory (taskmanager.memory.managed.size or"
            + " .fraction; a slot's share goes to operators and the state backend by"
            + " taskmanager.memory.managed.consumer-weights), run at a higher parallelism, or size"
            + " a smaller window (capacity, fpr)";
    shareBytes = share;
    if (bytes > share) {
      throw new IllegalStateException(
          need + "its share of the slot's managed memory is " + share + " bytes (a fraction "
              + fraction + " of the slot's " + memory.getMemorySize() + ")" + fix);
    }
    try {
      memory.reserveMemory(this, bytes);
    } catch (MemoryReservationException e) {
      throw new IllegalStateException(
          need + "the slot has " + memory.availableMemory() + " bytes of managed memory left" + fix,
          e);
    }
    reservedBytes = bytes;
  }

  @Override
  public void open() throws Exception {
    super.open();
    final int capacity = spec.batchSize;
    values = new Object[capacity];
    timestamps = new long[capacity];
    hasTimestamp = new boolean[capacity];
    shards = new int[capacity];
    clocks = new long[capacity];
    isNew = new byte[capacity];
    if (spec.key.isLong()) {
      longKeys = new long[capacity];
    } else {
      ends = new int[capacity];
      blob = new byte[capacity * 16];
    }
    reuse = new StreamRecord<>(null);
    // Not yet read: fill and currentFpr are NaN until the first reading ends (nextStatsMs is 0, so
    // it starts at the first flush); the bytes are known without reading a bit.
    stats = new double[] {window.sizingStats()[0], Double.NaN, Double.NaN, Double.NaN};
    final MetricGroup group = getMetricGroup().addGroup("bulkbloom");
    group.gauge("stateBytes", () -> (long) stats[0]);
    group.gauge("currentFpr", () -> stats[2]);
    group.gauge("fill", () -> stats[3]);
    group.gauge("promisedFpr", () -> spec.fpr);
    group.gauge("reservedBytes", () -> reservedBytes);
    overfull = group.counter("overfullGenerations");
    capped = group.counter("cappedGenerations");
    kept = group.counter("kept");
    dropped = group.counter("dropped");
    refused = group.counter("refused");
    refusedFor = new Counter[Refused.Reason.values().length];
    refusedFor[Refused.Reason.MISSING_TIME.ordinal()] = group.counter("missingTime");
    refusedFor[Refused.Reason.FUTURE.ordinal()] = group.counter("future");
    refusedFor[Refused.Reason.LATE.ordinal()] = group.counter("late");
  }

  @Override
  public void processElement(StreamRecord<T> record) throws Exception {
    final long time;
    if (spec.eventTime) {
      // A source without a timestamp assigner stamps NO_TIMESTAMP (Long.MIN_VALUE), which as a
      // time would hold the clock at the dawn of time and fill one generation forever.
      final long timestamp = record.hasTimestamp() ? record.getTimestamp() : Long.MIN_VALUE;
      if (timestamp == Long.MIN_VALUE) {
        if (!spec.refuseMissingTimestamps) {
          throw new IllegalStateException(
              "bulkbloom: a record has no timestamp (Long.MIN_VALUE, Flink's NO_TIMESTAMP: the"
                  + " source has no timestamp assigner), but BloomDedup runs on event time: assign"
                  + " timestamps (a WatermarkStrategy with a TimestampAssigner), use"
                  + " processingTime(), or refuseMissingTimestamps() to send such records to the"
                  + " side output");
        }
        refuse(record, Refused.Reason.MISSING_TIME, Long.MIN_VALUE);
        return;
      }
      final long latestAccepted = futureBound();
      if (timestamp > latestAccepted) {
        refuse(record, Refused.Reason.FUTURE, latestAccepted);
        return;
      }
      time = Math.floorDiv(timestamp, unitMs);
      // time < clock, so clock - time is positive and below 2^64: compared unsigned it cannot
      // overflow, whatever the two times.
      if (time < clock && Long.compareUnsigned(clock - time, latenessUnits) > 0) {
        final long earliestAccepted =
            clock < Long.MIN_VALUE + latenessUnits ? Long.MIN_VALUE : clock - latenessUnits;
        refuse(record, Refused.Reason.LATE, millisOf(earliestAccepted));
        return;
      }
    } else {
      time = Math.floorDiv(getProcessingTimeService().getCurrentProcessingTime(), unitMs);
    }
    clock = Math.max(clock, time);
    final int i = size;
    final T value = record.getValue();
    values[i] = value;
    hasTimestamp[i] = record.hasTimestamp();
    timestamps[i] = record.getTimestamp();
    shards[i] = routing.shardOfKey((Integer) getCurrentKey());
    clocks[i] = clock;
    if (spec.key.isLong()) {
      longKeys[i] = spec.key.longKey(value);
    } else {
      final byte[] key = spec.key.bytesKey(value);
      if (blob.length - blobEnd < key.length) {
        blob = Arrays.copyOf(blob, Math.max(2 * blob.length, blobEnd + key.length));
      }
      System.arraycopy(key, 0, blob, blobEnd, key.length);
      blobEnd += key.length;
      ends[i] = blobEnd;
    }
    size = i + 1;
    if (size == spec.batchSize) {
      flush();
    } else if (!timerPending) {
      timerPending = true;
      final long now = getProcessingTimeService().getCurrentProcessingTime();
      getProcessingTimeService().registerTimer(now + spec.flushInterval.toMillis(), this);
    }
  }

  @Override
  public void onProcessingTime(long time) throws Exception {
    timerPending = false;
    flush();
  }

  /** The latest timestamp (ms) accepted now: the wall clock plus maxFuture, saturated. */
  private long futureBound() {
    final long now = getProcessingTimeService().getCurrentProcessingTime();
    return now > Long.MAX_VALUE - maxFutureMs ? Long.MAX_VALUE : now + maxFutureMs;
  }

  /** A time in clock units as milliseconds, saturated to the range of a long. */
  private long millisOf(long units) {
    if (units > Long.MAX_VALUE / unitMs) {
      return Long.MAX_VALUE;
    }
    return units < Long.MIN_VALUE / unitMs ? Long.MIN_VALUE : units * unitMs;
  }

  /** Sends a record to the side output with its reason, and counts it. */
  private void refuse(StreamRecord<T> record, Refused.Reason reason, long bound) {
    final long timestamp = record.hasTimestamp() ? record.getTimestamp() : Long.MIN_VALUE;
    final Refused<T> refusal = new Refused<>(record.getValue(), reason, timestamp, bound);
    output.collect(
        refusedTag,
        timestamp == Long.MIN_VALUE
            ? new StreamRecord<>(refusal)
            : new StreamRecord<>(refusal, timestamp));
    refused.inc();
    refusedFor[reason.ordinal()].inc();
  }

  /** Dedups the buffered records with one native call and emits the new ones in order. */
  private void flush() {
    if (size > 0) {
      final int newRecords =
          spec.key.isLong()
              ? window.dedup(longKeys, shards, clocks, size, isNew)
              : window.dedup(blob, ends, shards, clocks, size, isNew);
      kept.inc(newRecords);
      dropped.inc(size - newRecords);
      for (int i = 0; i < size; ++i) {
        if (isNew[i] != 0) {
          @SuppressWarnings("unchecked")
          final T value = (T) values[i];
          if (hasTimestamp[i]) {
            output.collect(reuse.replace(value, timestamps[i]));
          } else {
            reuse.eraseTimestamp();
            output.collect(reuse.replace(value));
          }
        }
        values[i] = null;
      }
      size = 0;
      blobEnd = 0;
    }
    // Shards that got no record follow the subtask's clock too, so that every held shard's
    // state is the single window's at that clock (WindowShard's contract) and forgets on time.
    if (clock != Long.MIN_VALUE) {
      window.advanceTo(clock);
    }
    trackSizing();
    final long now = getProcessingTimeService().getCurrentProcessingTime();
    if (now >= nextStatsMs) {
      stepStats();
    }
  }

  /** Reads the next few held shards; publishes the stats when the reading is complete. */
  private void stepStats() {
    if (statsReading == null) {
      statsReading = new double[4];
      statsReadingNanos = 0;
    }
    final long start = System.nanoTime();
    final boolean complete = window.statsStep(STATS_STEP_BYTES, statsReading);
    statsReadingNanos += System.nanoTime() - start;
    if (complete) {
      stats = statsReading;
      statsReading = null;
      scheduleStats(statsReadingNanos);
    }
  }

  private void scheduleStats(long tookNanos) {
    nextStatsMs =
        getProcessingTimeService().getCurrentProcessingTime()
            + Math.max(STATS_INTERVAL_MS, STATS_COST_FACTOR * (tookNanos / 1_000_000));
  }

  @Override
  public void processWatermark(Watermark mark) throws Exception {
    flush();
    // The final watermark of a bounded input says "no more records", not a time. A watermark
    // past the future bound (a source's, after a record stamped years ahead) would pin the clock
    // as that record would have: records alone move the clock then.
    if (spec.eventTime && mark.getTimestamp() != Long.MAX_VALUE) {
      if (mark.getTimestamp() <= futureBound()) {
        clock = Math.max(clock, Math.floorDiv(mark.getTimestamp(), unitMs));
        window.advanceTo(clock);
        trackSizing();
      } else if (!warnedOfFutureWatermark) {
        warnedOfFutureWatermark = true;
        LOG.warn(
            "bulkbloom: watermark {} is after the wall clock plus maxFuture ({}); the window's"
                + " clock follows the records only while watermarks are that far ahead",
            mark.getTimestamp(),
            spec.maxFuture);
      }
    }
    super.processWatermark(mark);
  }

  @Override
  public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
    flush();
    super.prepareSnapshotPreBarrier(checkpointId);
  }

  @Override
  public void snapshotState(StateSnapshotContext context) throws Exception {
    super.snapshotState(context);
    if (size != 0) {
      throw new IllegalStateException("bulkbloom: a checkpoint came with records in flight");
    }
    final long start = System.nanoTime();
    final ShardStates.Moved moved = new ShardStates.Moved();
    for (int shard = held.getStartKeyGroup(); shard <= held.getEndKeyGroup(); ++shard) {
      states.snapshot(shard, moved);
    }
    states.fold(held.getStartKeyGroup(), held.getEndKeyGroup(), moved);
    LOG.debug(
        "bulkbloom: checkpoint {} moved {} bytes into keyed state in {} ms: {} of logs, {} of"
            + " bases, {} of manifests",
        context.getCheckpointId(),
        moved.total(),
        (System.nanoTime() - start) / 1_000_000,
        moved.logs,
        moved.bases,
        moved.manifests);
  }

  @Override
  public void endInput() throws Exception {
    flush();
  }

  @Override
  public void finish() throws Exception {
    flush();
    super.finish();
  }

  @Override
  public void close() throws Exception {
    try {
      super.close();
    } finally {
      if (window != null) {
        window.close();
        window = null;
      }
      if (reservedBytes > 0) {
        getContainingTask().getEnvironment().getMemoryManager().releaseMemory(this, reservedBytes);
        reservedBytes = 0;
      }
    }
  }
}
