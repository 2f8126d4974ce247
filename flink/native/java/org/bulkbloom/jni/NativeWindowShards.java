package org.bulkbloom.jni;

import java.lang.ref.Cleaner;

/**
 * The shards of one sliding window (bulkbloom's {@code WindowShard}) that one task holds, in
 * native memory. Event-time windows sized as the command line's {@code dedup --window T
 * --capacity N} sizes them; each call is one bulk native call over Java arrays.
 *
 * <p>Sized shards ({@code sized}) size each generation per period (docs/WINDOW.md "Sizing
 * shards"): the configured layout is rounded up to a multiple of S blocks ({@code
 * WindowConfig::shardable_by}), each shard sizes from its own keys times S, at least for the
 * capacity and at most for the max capacity and the {@link #generationBudget}, and a generation
 * whose period is projected past its size at half full grows within the period. Decisions depend
 * only on each shard's records and clocks, never on how they are batched. Fixed-size shards keep
 * the configured layout, as this class did before.
 *
 * <p>The JNI library is loaded by the constructor and the static methods, not by this class's
 * initializer: a load that fails (a full or noexec temporary folder) throws its own
 * UnsatisfiedLinkError each time and is tried again at the next call, where a failing initializer
 * would leave the class unusable in its class loader, every later use a bare
 * NoClassDefFoundError, through every restart of a job that keeps the loader.
 *
 * <p>Not safe for concurrent use. {@link #close()} frees the native memory at once; a Cleaner frees
 * it when an unclosed instance becomes unreachable.
 */
public final class NativeWindowShards implements AutoCloseable {
  private static final Cleaner CLEANER = Cleaner.create();

  /** The sizing of a window: what {@link #sizeWindow} reports. */
  public static final class Sizing {
    /** Blocks of each generation's layout. */
    public final long numBlocks;
    /** The layout's block index: 0 high32, 1 full64. */
    public final int blockIndex;
    /** Bytes of all generations of the whole window. */
    public final long memoryBytes;
    /** Clock units between rotations. */
    public final long period;
    /** One line for people. */
    public final String description;

    Sizing(long[] layout, String description) {
      this.numBlocks = layout[0];
      this.blockIndex = (int) layout[1];
      this.memoryBytes = layout[2];
      this.period = layout[3];
      this.description = description;
    }
  }

  /**
   * A held shard taken apart (bulkbloom/incremental.hpp's StateSnapshot): its metadata, its parts
   * (the last the open part, the one taking keys) and what went into the open part since the
   * previous snapshot.
   */
  public static final class Snapshot {
    /** The log holds what went into the open part since the previous snapshot, same open part. */
    public static final int SINCE_TAKEN = 0;
    /** The open part started empty since the previous snapshot: its bits are zero plus the log. */
    public static final int SINCE_EMPTY = 1;
    /** No log tells how the open part changed: only its bits do. */
    public static final int REWRITTEN = 2;

    private static final int PART_FIELDS = 5;

    /** Everything of the shard's window file but the bits, checksummed. */
    public final byte[] metadata;
    /** Per part, oldest first: period, part, blocks, bytes, before the clock (0 or 1). */
    private final long[] parts;
    /** SINCE_TAKEN, SINCE_EMPTY or REWRITTEN. */
    public final int change;
    /**
     * The log: 8-byte little-endian hashes in arrays of at most the chunk size asked for; null
     * when the change is REWRITTEN or the log is longer than asked for.
     */
    public final byte[][] log;
    /** Per closed part: period, part, blocks, change. */
    private final long[] closed;
    /** Per closed part: its final log as {@link #log} holds one; null when REWRITTEN. */
    private final byte[][][] closedLogs;

    Snapshot(
        byte[] metadata,
        long[] parts,
        int change,
        byte[][] log,
        long[] closed,
        byte[][][] closedLogs) {
      this.metadata = metadata;
      this.parts = parts;
      this.change = change;
      this.log = log;
      this.closed = closed;
      this.closedLogs = closedLogs;
    }

    public int numParts() {
      return parts.length / PART_FIELDS;
    }

    /** The period (clock / period) part {@code i} covers. */
    public long period(int i) {
      return parts[PART_FIELDS * i];
    }

    /** Which of its period's filters part {@code i} is, 0 the first. */
    public int part(int i) {
      return (int) parts[PART_FIELDS * i + 1];
    }

    /** The blocks of part {@code i}. */
    public long blocks(int i) {
      return parts[PART_FIELDS * i + 2];
    }

    /** The bytes of part {@code i}'s bits. */
    public long bytes(int i) {
      return parts[PART_FIELDS * i + 3];
    }

    /**
     * Whether part {@code i} was taken before the shard's clock started (no record yet): its
     * period is then minus its generation's age, and it is not the part of that period once the
     * clock runs (bulkbloom/incremental.hpp's PartId::before_clock). The same for every part.
     */
    public boolean beforeClock(int i) {
      return parts[PART_FIELDS * i + 4] != 0;
    }

    /**
     * How many parts stopped being open since the previous snapshot (a rotation, or a larger
     * filter taking over the period) and are still held: each comes with its final log, so that a
     * caller that held it as a base plus logs completes it without writing its bits.
     */
    public int numClosed() {
      return closed.length / 4;
    }

    /** Whether closed part {@code j} is part {@code i} of this snapshot. */
    public boolean closedIs(int j, int i) {
      return !beforeClock(i)
          && closed[4 * j] == period(i)
          && closed[4 * j + 1] == part(i)
          && closed[4 * j + 2] == blocks(i);
    }

    /** SINCE_TAKEN, SINCE_EMPTY or REWRITTEN: what closed part {@code j}'s log says of its bits. */
    public int closedChange(int j) {
      return (int) closed[4 * j + 3];
    }

    /** Closed part {@code j}'s final log, in arrays as {@link #log}; null when REWRITTEN. */
    public byte[][] closedLog(int j) {
      return closedLogs[j];
    }
  }

  /** Supplies the bits of the parts a shard is restored from (see {@link #restore}). */
  public interface PartSource {
    /**
     * Bytes {@code [offset, offset + length)} of part {@code index} of the metadata, whose identity
     * is (period, part, blocks): exactly {@code length} bytes, fewer in the packed form {@link
     * #storedChunk} gives, or null for zero bits. May throw; the exception reaches the caller of
     * {@link #restore}.
     */
    byte[] chunk(int index, long period, int part, long blocks, long offset, int length)
        throws Exception;
  }

  private static final class Handle implements Runnable {
    private long address;

    Handle(long address) {
      this.address = address;
    }

    @Override
    public synchronized void run() {
      if (address != 0) {
        free(address);
        address = 0;
      }
    }
  }

  private final Handle handle;
  private final Cleaner.Cleanable cleanable;

  /**
   * Holds no shard yet: {@code numShards} shards of the window, sized per period when {@code
   * sized}, for at most {@code maxCapacity} records per window length (0: no bound). Throws
   * IllegalArgumentException with the library's message for a bad configuration or a shard count
   * outside [1, blocks].
   */
  public NativeWindowShards(
      long window,
      long lateness,
      int generations,
      double fpr,
      long capacity,
      long seed,
      int numShards,
      boolean sized,
      long maxCapacity) {
    BulkbloomNative.load();
    handle =
        new Handle(
            create(
                window, lateness, generations, fpr, capacity, seed, numShards, sized,
                maxCapacity));
    cleanable = CLEANER.register(this, handle);
  }

  /**
   * The layout {@code WindowConfig::for_event_time(capacity / window, window, fpr, generations,
   * lateness)} gives, with the seed, and when {@code sized} made shardable by {@code numShards}.
   * Throws IllegalArgumentException naming a bad value.
   */
  public static Sizing size(
      long window,
      long lateness,
      int generations,
      double fpr,
      long capacity,
      long seed,
      int numShards,
      boolean sized) {
    BulkbloomNative.load();
    final long[] layout = new long[4];
    final String description =
        sizeWindow(
            window, lateness, generations, fpr, capacity, seed, numShards, sized, layout);
    return new Sizing(layout, description);
  }

  private long address() {
    final long address = handle.address;
    if (address == 0) {
      throw new IllegalStateException("bulkbloom: the window shards were closed");
    }
    return address;
  }

  /** Holds shard {@code shard}, empty with an unstarted clock (replacing one held). */
  public void addEmpty(int shard) {
    addEmpty(address(), shard);
  }

  /** Holds shard {@code shard} as {@link #bytes} wrote it; throws if it is another window's. */
  public void load(int shard, byte[] bytes) {
    load(address(), shard, bytes);
  }

  /**
   * Starts logging what goes into held shard {@code shard}'s open part (nothing changes if the log
   * runs already): each {@link #takeSnapshot} then takes what went in since the previous one. The
   * log grows until taken, by 8 bytes per new key, and starts again at each rotation.
   */
  public void enableChangeLog(int shard) {
    enableChangeLog(address(), shard);
  }

  /**
   * Held shard {@code shard} taken apart; the log starts again empty. The log comes in arrays of
   * at most {@code chunkBytes} (a multiple of 8), or not at all when longer than {@code
   * maxLogBytes}.
   */
  public Snapshot takeSnapshot(int shard, long maxLogBytes, int chunkBytes) {
    return takeSnapshot(address(), shard, maxLogBytes, chunkBytes);
  }

  /**
   * Copies bytes {@code [offset, offset + out.length)} of part {@code index} (of the last {@link
   * #takeSnapshot}'s parts) of held shard {@code shard} into {@code out}; returns whether any is
   * non-zero.
   */
  public boolean copyPart(int shard, int index, long offset, byte[] out) {
    return copyPart(address(), shard, index, offset, out);
  }

  /**
   * Bytes {@code [offset, offset + length)} of part {@code index} (of the last {@link
   * #takeSnapshot}'s parts) of held shard {@code shard} as a {@link PartSource} gives them back:
   * null when all zero, else the packed form when it is shorter than the bits (a sparse chunk:
   * tag byte 1, then the gap before each set bit as a varint; docs/FORMAT.md "Flink keyed state"),
   * else the bits.
   */
  public byte[] storedChunk(int shard, int index, long offset, int length) {
    return storedChunk(address(), shard, index, offset, length);
  }

  /**
   * Holds shard {@code shard} as {@code metadata} (a {@link Snapshot}'s) describes it, each part's
   * bits from {@code source} in pieces of {@code chunkBytes} (the last of a part shorter); {@link
   * #replay} the logs taken since then next. Throws IllegalArgumentException if the metadata is
   * damaged or another window's, and what {@code source} throws; the shard held before stays then.
   */
  public void restore(int shard, byte[] metadata, PartSource source, int chunkBytes) {
    restore(address(), shard, metadata, source, chunkBytes);
  }

  /**
   * Whether the parts {@code metadata} (a {@link Snapshot}'s) describes were taken before the
   * shard's clock started ({@link Snapshot#beforeClock}), for state stored without that flag.
   * Throws IllegalArgumentException if the metadata is damaged.
   */
  public static boolean partsBeforeClock(byte[] metadata) {
    BulkbloomNative.load();
    return metadataBeforeClock(metadata);
  }

  /** Sets the bits of a {@link Snapshot#log} array in held shard {@code shard}'s open part. */
  public void replay(int shard, byte[] log) {
    replay(address(), shard, -1, log);
  }

  /**
   * Sets the bits of a log array ({@link Snapshot#log}, {@link Snapshot#closedLog}) in part {@code
   * index} (in its snapshot's order) of held shard {@code shard}, just restored.
   */
  public void replay(int shard, int index, byte[] log) {
    if (index < 0) {
      throw new IllegalArgumentException("bulkbloom: part index " + index + " is negative");
    }
    replay(address(), shard, index, log);
  }

  /** The window file bytes of held shard {@code shard}: generations, clock and configuration. */
  public byte[] bytes(int shard) {
    return bytes(address(), shard);
  }

  /**
   * Dedups records 0..n-1 in order: record i has key {@code keys[i]}, belongs to held shard
   * {@code shards[i]}, and comes at window clock {@code clocks[i]}. Writes 1 to {@code isNew[i]} if
   * no generation held the key. Returns the number of new records.
   */
  public int dedup(long[] keys, int[] shards, long[] clocks, int n, byte[] isNew) {
    return dedupLongs(address(), keys, shards, clocks, n, isNew);
  }

  /** As above for byte-string keys: key i is {@code blob[ends[i-1] .. ends[i])} (from 0 for i = 0). */
  public int dedup(byte[] blob, int[] ends, int[] shards, long[] clocks, int n, byte[] isNew) {
    return dedupBytes(address(), blob, ends, shards, clocks, n, isNew);
  }

  /** Moves every held shard's clock to {@code clock} (rotating as due); earlier clocks do nothing. */
  public void advanceTo(long clock) {
    advanceTo(address(), clock);
  }

  /** The largest clock of the held shards, or Long.MIN_VALUE when none has started. */
  public long clock() {
    return clock(address());
  }

  /**
   * {bytes of the held shards, their blocks, their current false-positive rate, their fraction of
   * set bits}; the rate and the fraction weigh each shard by its blocks. Reads every bit.
   */
  public double[] stats() {
    final double[] out = new double[4];
    stats(address(), out);
    return out;
  }

  /**
   * One step of {@link #stats()} taken a few shards at a time: reads whole held shards, at least
   * one and at least {@code bytes} of them, from where the last step stopped. When it reaches the
   * last held shard it writes the stats of all of them (each read at its step) to {@code out}
   * (length 4), starts the next reading over and returns true; otherwise it returns false.
   */
  public boolean statsStep(long bytes, double[] out) {
    return statsStep(address(), bytes, out);
  }

  /**
   * Bounds each generation of each held shard (all its filters together) to {@code bytes}, so
   * that the held shards never take more than G times that; 0 lifts the bound. Sized shards only.
   * Throws IllegalArgumentException when the bound does not hold the capacity's keys.
   */
  public void generationBudget(long bytes) {
    generationBudget(address(), bytes);
  }

  /**
   * {bytes of the held shards, their generations found over their size since they were made or
   * loaded, growths refused since this instance was made (the max capacity or the generation
   * budget)}. Reads no bit.
   */
  public long[] sizingStats() {
    final long[] out = new long[3];
    sizingStats(address(), out);
    return out;
  }

  /** The library's own shard_of() for {@code long} keys (for checking routing). */
  public int[] shardOf(long[] keys) {
    final int[] out = new int[keys.length];
    shardOfLongs(address(), keys, out);
    return out;
  }

  /** The library's own shard_of() for byte-string keys (for checking routing). */
  public int[] shardOf(byte[][] keys) {
    final int[] out = new int[keys.length];
    shardOfBytes(address(), keys, out);
    return out;
  }

  /** How many instances in this process hold native memory now (not yet closed or cleaned). */
  public static long liveInstances() {
    BulkbloomNative.load();
    return liveSets();
  }

  /**
   * How many held shards the {@link #stats()} and {@link #statsStep} calls of all instances in this
   * process have read, so that a test sees when an operator reads its window.
   */
  public static long shardsReadForStats() {
    BulkbloomNative.load();
    return statsShardsRead();
  }

  /** Frees the native memory now; later calls throw IllegalStateException. */
  @Override
  public void close() {
    cleanable.clean();
  }

  private static native String sizeWindow(
      long window,
      long lateness,
      int generations,
      double fpr,
      long capacity,
      long seed,
      int numShards,
      boolean sized,
      long[] layoutOut);

  private static native long create(
      long window,
      long lateness,
      int generations,
      double fpr,
      long capacity,
      long seed,
      int numShards,
      boolean sized,
      long maxCapacity);

  private static native void free(long handle);

  private static native long liveSets();

  private static native long statsShardsRead();

  private static native void addEmpty(long handle, int shard);

  private static native void load(long handle, int shard, byte[] bytes);

  private static native byte[] bytes(long handle, int shard);

  private static native void enableChangeLog(long handle, int shard);

  private static native Snapshot takeSnapshot(
      long handle, int shard, long maxLogBytes, int chunkBytes);

  private static native boolean copyPart(
      long handle, int shard, int index, long offset, byte[] out);

  private static native byte[] storedChunk(
      long handle, int shard, int index, long offset, int length);

  private static native void restore(
      long handle, int shard, byte[] metadata, PartSource source, int chunkBytes);

  private static native boolean metadataBeforeClock(byte[] metadata);

  private static native void replay(long handle, int shard, int index, byte[] log);

  private static native int dedupLongs(
      long handle, long[] keys, int[] shards, long[] clocks, int n, byte[] isNew);

  private static native int dedupBytes(
      long handle, byte[] blob, int[] ends, int[] shards, long[] clocks, int n, byte[] isNew);

  private static native void advanceTo(long handle, long clock);

  private static native long clock(long handle);

  private static native void stats(long handle, double[] out);

  private static native boolean statsStep(long handle, long bytes, double[] out);

  private static native void generationBudget(long handle, long bytes);

  private static native void sizingStats(long handle, long[] out);

  private static native void shardOfLongs(long handle, long[] keys, int[] out);

  private static native void shardOfBytes(long handle, byte[][] keys, int[] out);
}
