package org.bulkbloom.flink;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.core.memory.ManagedMemoryUseCase;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SideOutputDataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.util.OutputTag;
import org.bulkbloom.jni.NativeWindowShards;

/**
 * Sliding-window dedup of a {@code DataStream<T>} with bulkbloom's window (docs/WINDOW.md): a
 * record is dropped when a record with the same key arrived within the window length T before it
 * (always), or as a false positive at the configured rate; otherwise it passes unchanged, with its
 * timestamp, in the order it came within each subtask.
 *
 * <pre>{@code
 * DataStream<Event> unique = BloomDedup.<Event>byString(e -> e.id)
 *     .window(Duration.ofHours(36)).capacity(1_500_000_000L).fpr(0.001)
 *     .apply(events);
 * }</pre>
 *
 * <p>The window is cut into {@link #shards S} block-range shards, which become the operator's
 * max parallelism: records are routed by their key's shard, each subtask holds the shards of its
 * key groups, and checkpoints store each shard's window file bytes as raw keyed state of its key
 * group. A restore (after a failure, or at another parallelism) hands whole shards to their owners
 * and gives exactly the decisions of an uninterrupted run.
 *
 * <p>Clock: event time by default (the records' timestamps, in units of {@link #clockUnit}, default
 * one millisecond), or {@link #processingTime()}. Each subtask's clock is the largest time it has
 * seen, records' and watermarks'. When every subtask receives its records in non-decreasing time
 * order (an in-order source), every decision equals that of the command line's {@code bulkbloom
 * dedup --window T --time-field N --generations G --lateness L --max-future F --capacity N --fpr P
 * --seed S} on the same records with the same clock unit; with records up to L late, a repeat
 * within T is still always dropped.
 *
 * <p>On event time the clock is guarded. A record without a timestamp (a source with no
 * timestamp assigner stamps Long.MIN_VALUE, Flink's NO_TIMESTAMP) fails the job, or with {@link
 * #refuseMissingTimestamps()} is refused. A record stamped after the wall clock plus {@link
 * #maxFuture} (default one day, as the command line's) is refused, and such a watermark does not
 * move the clock: either would pin the window's clock far ahead and make every later record late.
 * A record more than {@link #lateness} behind its subtask's clock is refused: the window could not
 * keep its promise for it. A refused record is neither emitted nor inserted nor moves the clock; it
 * goes to the side output {@link #refused}, as a {@link Refused} with its reason, and is counted.
 *
 * <p>Sizing: each generation of each shard is sized per period (docs/WINDOW.md "Sizing per
 * period" and "Sizing shards"): for the most keys a generation of the shard took in its period,
 * times S, at least for {@link #capacity} and at most for {@link #maxCapacity}, every block count
 * a multiple of S so that one routing serves every size. A generation whose period is projected
 * past its size once it is half full (a day bringing 10x the keys of the one before) grows within
 * the period: a larger filter takes the rest of it. So the promised rate holds when the stream
 * grows; a generation that still goes over its size is counted. {@link #fixedSizeShards()} keeps
 * every generation at the configured size, as operators before this sizing did: their checkpoints
 * and savepoints restore only with it.
 *
 * <p>Metrics, in the operator's group {@code bulkbloom}: the counters {@code kept} (emitted),
 * {@code dropped} (repeats and false positives), {@code refused} (on the side output: {@code
 * missingTime} + {@code future} + {@code late}), {@code overfullGenerations} (generations of the
 * held shards that took more keys than they are sized for: until they leave the window the rate
 * is past its promise) and {@code cappedGenerations} (generations that could not grow as their
 * period asked, for the max capacity or the managed memory); the gauges {@code stateBytes}, {@code
 * fill} and {@code currentFpr} of the held shards, refreshed every 10 s at most and within 1 % of
 * the task's time (read a few shards a batch, so that no batch waits for the whole window, the
 * first record neither: {@code fill} and {@code currentFpr} are NaN until the first reading ends),
 * {@code promisedFpr} (the configured rate, the promise {@code currentFpr} is measured against)
 * and {@code reservedBytes} (managed memory held).
 *
 * <p>Memory: the window's bytes are declared as the operator's managed memory (Flink's {@code
 * OPERATOR} use case), and each subtask reserves its shards' bytes from its slot when it starts,
 * failing with a message naming both sizes when they do not fit. Sized shards grow within the
 * subtask's share of the slot's managed memory: each generation of each held shard may take a
 * G-th of the shard's part of it, all its filters together, so the held shards never take more
 * than the share; the reservation follows their bytes. A generation that would grow past that is
 * held at it and counted in {@code cappedGenerations}, with a warning in the log the first time:
 * the rate is then past its promise while its period brings more keys. Not in the reservation:
 * each held shard's change log (8 bytes a key new to its open part since the last checkpoint,
 * so that a checkpoint stores what changed), which all its logs together never take past the
 * bytes of the largest part open since the last checkpoint (a generation's filter, at most a G-th
 * of the shard's share): past that the open part's log is dropped and the next checkpoint stores
 * that part whole. Checkpoints that come
 * keep it far below that; leave room for it in the task's off-heap memory
 * ({@code taskmanager.memory.task.off-heap.size}) for a job whose checkpoints may stall.
 *
 * <p>The JNI library comes inside the operator jar: see {@link
 * org.bulkbloom.jni.BulkbloomNative}.
 */
public final class BloomDedup<T> implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The default shard count (and so the operator's max parallelism). */
  public static final int DEFAULT_SHARDS = 128;

  /** The id of the side output of refused records ({@link #refusedTag}). */
  public static final String REFUSED_ID = "bulkbloom-refused";

  /** Takes a record's {@code long} key, hashed as the library hashes {@code uint64_t} keys. */
  @FunctionalInterface
  public interface LongKeySelector<T> extends Serializable {
    long key(T record) throws Exception;
  }

  /** Takes a record's byte-string key, hashed as the command line hashes a csv field's bytes. */
  @FunctionalInterface
  public interface BytesKeySelector<T> extends Serializable {
    byte[] key(T record) throws Exception;
  }

  /** Takes a record's string key, hashed as its UTF-8 bytes. */
  @FunctionalInterface
  public interface StringKeySelector<T> extends Serializable {
    String key(T record) throws Exception;
  }

  final DedupKey<T> key;
  Duration window;
  Duration lateness = Duration.ZERO;
  Duration clockUnit = Duration.ofMillis(1);
  Duration maxFuture = Duration.ofDays(1);
  boolean refuseMissingTimestamps;
  int generations = 4;
  double fpr = 0.001;
  long capacity;
  long maxCapacity;
  boolean sized = true;
  long seed;
  int shards = DEFAULT_SHARDS;
  int batchSize = 4096;
  Duration flushInterval = Duration.ofMillis(100);
  boolean eventTime = true;

  private BloomDedup(DedupKey<T> key) {
    this.key = key;
  }

  /** Dedup by a {@code long} key. */
  public static <T> BloomDedup<T> byLong(LongKeySelector<T> key) {
    return new BloomDedup<>(new DedupKey.OfLong<>(key));
  }

  /** Dedup by a byte-string key. */
  public static <T> BloomDedup<T> byBytes(BytesKeySelector<T> key) {
    return new BloomDedup<>(new DedupKey.OfBytes<>(key));
  }

  /** Dedup by a string key (its UTF-8 bytes). */
  public static <T> BloomDedup<T> byString(StringKeySelector<T> key) {
    return byBytes(record -> key.key(record).getBytes(StandardCharsets.UTF_8));
  }

  /** T: a repeat this close to an earlier arrival of its key is always dropped. Required. */
  public BloomDedup<T> window(Duration length) {
    this.window = length;
    return this;
  }

  /** L: how late (behind the largest time seen) a record may be while T still holds. */
  public BloomDedup<T> lateness(Duration lateness) {
    this.lateness = lateness;
    return this;
  }

  /**
   * How far after the wall clock a record's timestamp may lie (default one day, the command line's
   * {@code --max-future}): a later record is refused, as it would move the clock past the records
   * to come. Times in the past are never bounded (replaying an old log is normal). The wall clock
   * is read at each record, so a record refused once may be accepted when replayed after the wall
   * clock has caught up with it. {@code ChronoUnit.FOREVER.getDuration()} turns the bound off.
   */
  public BloomDedup<T> maxFuture(Duration bound) {
    this.maxFuture = bound;
    return this;
  }

  /**
   * Refuses event-time records that carry no timestamp (send them to the side output and count
   * them) instead of failing the job, the default.
   */
  public BloomDedup<T> refuseMissingTimestamps() {
    this.refuseMissingTimestamps = true;
    return this;
  }

  /** The window clock's unit (default 1 ms; 1 s gives the command line's clock). */
  public BloomDedup<T> clockUnit(Duration unit) {
    this.clockUnit = unit;
    return this;
  }

  /** G, the generations of the window (default 4): keys are forgotten after T·G/(G−1). */
  public BloomDedup<T> generations(int generations) {
    this.generations = generations;
    return this;
  }

  /** The window's false-positive rate when full (default 0.001). */
  public BloomDedup<T> fpr(double fpr) {
    this.fpr = fpr;
    return this;
  }

  /** Records expected within one window length T, at most (the command line's --capacity). */
  public BloomDedup<T> capacity(long records) {
    this.capacity = records;
    return this;
  }

  /**
   * Records within one window length that a generation is sized for at most, however many its
   * period brings (default: no bound but the managed memory). At least {@link #capacity}.
   */
  public BloomDedup<T> maxCapacity(long records) {
    this.maxCapacity = records;
    return this;
  }

  /**
   * Keeps every generation of every shard at the size {@link #capacity} gives, as operators
   * before sizing per period did, with their layout and routing: the one way to restore their
   * checkpoints and savepoints (a restore of such state without it fails naming this option). A
   * window so made loses its promise when the stream brings more than the capacity.
   */
  public BloomDedup<T> fixedSizeShards() {
    this.sized = false;
    return this;
  }

  /** The XXH64 seed of the layout (default 0). */
  public BloomDedup<T> seed(long seed) {
    this.seed = seed;
    return this;
  }

  /**
   * S, the number of block-range shards and the operator's max parallelism (default 128): the
   * largest parallelism a restore can ever use. At most the blocks of a generation and 32768.
   */
  public BloomDedup<T> shards(int shards) {
    this.shards = shards;
    return this;
  }

  /** Records per native call (default 4096). */
  public BloomDedup<T> batchSize(int records) {
    this.batchSize = records;
    return this;
  }

  /** The longest a record waits in a part-filled batch (default 100 ms of processing time). */
  public BloomDedup<T> flushInterval(Duration interval) {
    this.flushInterval = interval;
    return this;
  }

  /** Use the processing time at each record's arrival as its time, instead of its timestamp. */
  public BloomDedup<T> processingTime() {
    this.eventTime = false;
    return this;
  }

  /**
   * Checks the configuration and sizes the window. Throws IllegalArgumentException naming the bad
   * value.
   */
  public NativeWindowShards.Sizing sizing() {
    requirePositive("window", window);
    if (lateness == null || lateness.isNegative()) {
      throw new IllegalArgumentException("bulkbloom: lateness " + lateness + " must be 0 or more");
    }
    requirePositive("clockUnit", clockUnit);
    final long unitNanos = clockUnit.toNanos();
    if (unitNanos % 1_000_000 != 0) {
      throw new IllegalArgumentException(
          "bulkbloom: clockUnit " + clockUnit + " must be a whole number of milliseconds");
    }
    if (window.toNanos() % unitNanos != 0 || lateness.toNanos() % unitNanos != 0) {
      throw new IllegalArgumentException(
          "bulkbloom: window " + window + " and lateness " + lateness
              + " must be whole multiples of clockUnit " + clockUnit);
    }
    if (!(fpr > 0.0 && fpr < 1.0)) {
      throw new IllegalArgumentException(
          "bulkbloom: fpr " + fpr + " is out of range: expected 0 < fpr < 1");
    }
    if (capacity <= 0) {
      throw new IllegalArgumentException(
          "bulkbloom: capacity " + capacity
              + " is out of range: give the records expected within one window length (>= 1)");
    }
    if (maxCapacity != 0 && (maxCapacity < capacity || !sized)) {
      throw new IllegalArgumentException(
          "bulkbloom: maxCapacity " + maxCapacity + " must be at least the capacity " + capacity
              + (sized ? "" : ", and applies to shards sized per period (not fixedSizeShards())"));
    }
    if (batchSize < 1) {
      throw new IllegalArgumentException("bulkbloom: batchSize " + batchSize + " must be >= 1");
    }
    requirePositive("flushInterval", flushInterval);
    requirePositive("maxFuture", maxFuture);
    final NativeWindowShards.Sizing sizing =
        NativeWindowShards.size(
            window.toNanos() / unitNanos,
            lateness.toNanos() / unitNanos,
            generations,
            fpr,
            capacity,
            seed,
            Math.max(shards, 1),
            sized);
    if (shards < 1
        || shards > KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM
        || shards > sizing.numBlocks) {
      throw new IllegalArgumentException(
          "bulkbloom: shards " + shards + " is out of range: expected 1 to "
              + Math.min(sizing.numBlocks, KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM)
              + " (Flink's largest max parallelism, and the blocks of each generation of "
              + sizing.description + ")");
    }
    return sizing;
  }

  private static void requirePositive(String name, Duration value) {
    if (value == null || value.isZero() || value.isNegative()) {
      throw new IllegalArgumentException(
          "bulkbloom: " + name + " " + value + " must be a positive duration");
    }
  }

  /** The tag of the side output of refused records, for records of type {@code recordType}. */
  @SuppressWarnings({"unchecked", "rawtypes"})
  public static <T> OutputTag<Refused<T>> refusedTag(TypeInformation<T> recordType) {
    final TypeInformation refused =
        Types.POJO(
            Refused.class,
            Map.of(
                "record", recordType,
                "reason", Types.ENUM(Refused.Reason.class),
                "timestamp", Types.LONG,
                "bound", Types.LONG));
    return new OutputTag<Refused<T>>(REFUSED_ID, refused);
  }

  /**
   * The records refused by the operator that made {@code deduped} (what {@link #apply} returned),
   * each with its reason. Keep them, count them or fail on them; left unread they are lost.
   */
  public static <T> SideOutputDataStream<Refused<T>> refused(
      SingleOutputStreamOperator<T> deduped) {
    return deduped.getSideOutput(refusedTag(deduped.getType()));
  }

  /**
   * The deduplicated stream: {@code input} routed by shard to an operator whose max parallelism is
   * the shard count; {@link #refused} gives its side output. Throws IllegalArgumentException for a
   * bad configuration.
   */
  public SingleOutputStreamOperator<T> apply(DataStream<T> input) {
    final NativeWindowShards.Sizing sizing = sizing();
    final ShardRouting routing =
        new ShardRouting(sizing.numBlocks, sizing.blockIndex == 1, seed, shards);
    final SingleOutputStreamOperator<T> out =
        input
            .keyBy(new ShardKeySelector<>(key, routing))
            .transform(
                "BloomDedup",
                input.getType(),
                new BloomDedupOperator<>(this, routing, refusedTag(input.getType())));
    out.setMaxParallelism(shards);
    // The window lives in native memory: declared as the operator's managed memory, Flink counts
    // it in the TaskManager's budget, and the operator reserves its shards' bytes when it starts.
    // The weight shares a slot's operator memory among such operators in proportion to size.
    out.getTransformation()
        .declareManagedMemoryUseCaseAtOperatorScope(
            ManagedMemoryUseCase.OPERATOR,
            (int) Math.max(1, Math.min(Integer.MAX_VALUE, sizing.memoryBytes >> 20)));
    out.setDescription("bulkbloom window dedup: " + sizing.description + ", " + shards + " shards");
    return out;
  }

  /** Routes a record to its shard's Flink key. */
  static final class ShardKeySelector<T> implements KeySelector<T, Integer> {
    private static final long serialVersionUID = 1L;
    private final DedupKey<T> key;
    private final ShardRouting routing;

    ShardKeySelector(DedupKey<T> key, ShardRouting routing) {
      this.key = key;
      this.routing = routing;
    }

    @Override
    public Integer getKey(T record) throws Exception {
      final int shard =
          key.isLong()
              ? routing.shardOfLong(key.longKey(record))
              : routing.shardOfBytes(key.bytesKey(record));
      return routing.keyOfShard(shard);
    }
  }
}
