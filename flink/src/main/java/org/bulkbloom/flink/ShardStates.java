package org.bulkbloom.flink;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.KeyContext;
import org.bulkbloom.jni.NativeWindowShards;
import org.bulkbloom.jni.NativeWindowShards.Snapshot;

/**
 * The held window shards in the operator's keyed state, so that a checkpoint writes what changed
 * (docs/FORMAT.md "Flink keyed state"). Shard s lives under the key whose key group is s: a
 * manifest (a {@code ValueState<byte[]>}: the shard's snapshot metadata and where its parts are)
 * and chunks of at most {@link #CHUNK_BYTES} (a {@code MapState<Long, byte[]>}). Every part is a
 * base image plus the logs taken since: the open part gets the log of each checkpoint, and when it
 * stops being open (a rotation, or a larger filter taking over its period) its final log, so that
 * no part's bits are ever written at a rotation. Bases are folded (the part's bits written over
 * its base) once its logs pass a fraction of its bytes, a few chunks a checkpoint across all held
 * shards ({@link #FOLD_BYTES_PER_CHECKPOINT}), so that no checkpoint's work is large; a part whose
 * bits no stored state plus log tells is written whole, as the fold of a new zero base with no
 * limit ({@link #refold}, the one way bases are written). Parts leave when the window drops them.
 * All-zero chunks are not stored, and a chunk of a base mostly zero is packed (its set bits' gaps).
 *
 * <p>Everything here runs on the task thread and only moves bytes into the keyed state backend;
 * the backend makes them durable asynchronously (RocksDB and ForSt with incremental checkpoints
 * upload what changed; the hashmap backend copies all of it, as it does for any state). Nothing
 * waits for a checkpoint's outcome: when a checkpoint fails after its snapshot (declined, expired,
 * aborted), what the snapshot moved (the logs the take handed over, sealed parts' final logs, fold
 * progress) stays in the keyed state and the next snapshot builds on it, so no checkpoint
 * notification is needed, and none missing loses anything.
 */
final class ShardStates {
  /** The most bytes of one stored chunk, a multiple of 8 (a log chunk holds whole hashes). */
  static final int CHUNK_BYTES = 1 << 20;

  /**
   * The bytes of part bits that one checkpoint reads to fold bases across all held shards, beyond
   * twice the logs it wrote (one chunk more at most): a few milliseconds on the task thread. A
   * fold writes about a byte of bits per byte of log it covers, so twice the logs keeps up with
   * any rate, and the constant with a slow one.
   */
  static final long FOLD_BYTES_PER_CHECKPOINT = 4L << 20;

  // An open part whose logs pass this many times its bytes (inserts outrunning the folds) is
  // written whole at once: it bounds the state and the replay at restore.
  private static final double MAX_LOG_FRACTION = 4.0;

  // 1: each sealed part's bits, the open part's base and logs. 2: each part a base and logs,
  // with a fold in progress. 3: and whether it was taken before the clock started (versions 1
  // and 2 tell it by their metadata). 4: as 3, and a base chunk shorter than its bits is packed
  // (NativeWindowShards.storedChunk); a chunk of its bits' length is the bits in every version,
  // so that the chunks of older versions restore as they are. 5: as 4, the logs as runs of
  // consecutive image numbers with their byte totals, so that a manifest no longer grows by 16
  // bytes a checkpoint until a fold.
  private static final int MANIFEST_VERSION = 5;
  // A chunk's key: its storage's number times 2^24 plus its index (a part of up to 16 TiB).
  private static final int CHUNK_INDEX_BITS = 24;

  /** The bytes a checkpoint moved into keyed state, by kind, for its log line. */
  static final class Moved {
    long logs;
    // Folds, and parts written whole.
    long bases;
    long manifests;

    long total() {
      return logs + bases + manifests;
    }
  }

  private static int chunksOf(long bytes) {
    return (int) ((bytes + CHUNK_BYTES - 1) / CHUNK_BYTES);
  }

  /**
   * Logs under the consecutive image numbers {@code first} to {@code first + count - 1}, oldest
   * first, each stored whole in {@code chunks} chunks: a part's logs in a few runs, however many
   * checkpoints wrote them (each checkpoint's log takes the next number).
   */
  record LogRun(long first, int count, int chunks) {}

  /**
   * One part: its base (the chunks stored under storage number {@code baseId}; the others all
   * zero) and the logs to replay into it, oldest first, {@code logBytes} in all. A fold rewrites
   * the base chunk by chunk from the part's bits, over as many checkpoints as it takes: each chunk
   * written holds at least what the base and the first {@code covered} logs ({@code
   * coveredBytes}) held, so once chunks [0, folded) are all of them those logs go. Until then a
   * restore replays every log over the mixed base, which gives the same bits (bits are only ever
   * set).
   */
  static final class Part {
    final long period;
    final int part;
    final long blocks;
    // Taken before the shard's clock started: not the part of `period` once the clock runs.
    final boolean beforeClock;
    final long bytes;
    final long baseId;
    final BitSet present;
    final List<LogRun> logs;
    long logBytes;
    // The fold in progress: chunks rewritten, or -1 for none; the logs it covers and their bytes.
    int folded = -1;
    int covered;
    long coveredBytes;

    Part(
        long period,
        int part,
        long blocks,
        boolean beforeClock,
        long bytes,
        long baseId,
        BitSet present) {
      this.period = period;
      this.part = part;
      this.blocks = blocks;
      this.beforeClock = beforeClock;
      this.bytes = bytes;
      this.baseId = baseId;
      this.present = present;
      this.logs = new ArrayList<>();
    }

    Part(Snapshot snapshot, int i, long baseId, BitSet present) {
      this(
          snapshot.period(i),
          snapshot.part(i),
          snapshot.blocks(i),
          snapshot.beforeClock(i),
          snapshot.bytes(i),
          baseId,
          present);
    }

    Part copy() {
      final Part p =
          new Part(period, part, blocks, beforeClock, bytes, baseId, (BitSet) present.clone());
      p.logs.addAll(logs);
      p.logBytes = logBytes;
      p.folded = folded;
      p.covered = covered;
      p.coveredBytes = coveredBytes;
      return p;
    }

    /** Appends the log under image number {@code id}: {@code chunks} chunks, {@code bytes}. */
    void addLog(long id, int chunks, long bytes) {
      final LogRun last = logs.isEmpty() ? null : logs.get(logs.size() - 1);
      if (last != null && last.chunks() == chunks && last.first() + last.count() == id) {
        logs.set(logs.size() - 1, new LogRun(last.first(), last.count() + 1, chunks));
      } else {
        logs.add(new LogRun(id, 1, chunks));
      }
      logBytes += bytes;
    }

    int logCount() {
      int count = 0;
      for (LogRun run : logs) {
        count += run.count();
      }
      return count;
    }

    /** Forgets the first {@code n} logs, returning them, and {@code bytes}, their bytes. */
    List<LogRun> dropFirstLogs(int n, long bytes) {
      final List<LogRun> dropped = new ArrayList<>();
      int left = n;
      while (left > 0) {
        final LogRun run = logs.get(0);
        if (run.count() <= left) {
          dropped.add(logs.remove(0));
          left -= run.count();
        } else {
          dropped.add(new LogRun(run.first(), left, run.chunks()));
          logs.set(0, new LogRun(run.first() + left, run.count() - left, run.chunks()));
          left = 0;
        }
      }
      logBytes -= bytes;
      return dropped;
    }

    /**
     * Writes the fields manifest versions 3 to 5 list for a part in the same order, from its
     * period to {@code covered}; what follows them, its logs, is each version's own.
     */
    void writeHead(DataOutputStream out) throws IOException {
      out.writeLong(period);
      out.writeInt(part);
      out.writeLong(blocks);
      out.writeBoolean(beforeClock);
      out.writeLong(bytes);
      out.writeLong(baseId);
      final byte[] presentBytes = present.toByteArray();
      out.writeInt(presentBytes.length);
      out.write(presentBytes);
      out.writeInt(folded);
      out.writeInt(covered);
    }

    boolean isPart(Snapshot snapshot, int i) {
      return period == snapshot.period(i)
          && part == snapshot.part(i)
          && blocks == snapshot.blocks(i)
          && beforeClock == snapshot.beforeClock(i)
          && bytes == snapshot.bytes(i);
    }

  }

  /** What a shard's keyed state holds: the decoded manifest. */
  static final class Manifest {
    long nextId = 1;
    byte[] metadata;
    // Every part, oldest first (the snapshot's order); the last is the open part.
    final List<Part> parts = new ArrayList<>();

    Part find(Snapshot snapshot, int i) {
      for (Part p : parts) {
        if (p.isPart(snapshot, i)) {
          return p;
        }
      }
      return null;
    }

    Part open() {
      return parts.get(parts.size() - 1);
    }

    /** Writes what every manifest version starts with: {@code version}, then what it holds. */
    void writeHeader(DataOutputStream out, int version) throws IOException {
      out.writeInt(version);
      out.writeLong(nextId);
      out.writeInt(metadata.length);
      out.write(metadata);
      out.writeInt(parts.size());
    }

    byte[] encode() throws IOException {
      final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      final DataOutputStream out = new DataOutputStream(bytes);
      writeHeader(out, MANIFEST_VERSION);
      for (Part p : parts) {
        p.writeHead(out);
        out.writeLong(p.coveredBytes);
        out.writeLong(p.logBytes);
        out.writeInt(p.logs.size());
        for (LogRun run : p.logs) {
          out.writeLong(run.first());
          out.writeInt(run.count());
          out.writeInt(run.chunks());
        }
      }
      out.flush();
      return bytes.toByteArray();
    }

    static Manifest decode(byte[] encoded, int shard) throws IOException {
      final DataInputStream in = new DataInputStream(new ByteArrayInputStream(encoded));
      final int version = in.readInt();
      if (version < 1 || version > MANIFEST_VERSION) {
        throw new IllegalStateException(
            "bulkbloom: the keyed state of shard " + shard + " has manifest version " + version
                + "; this bulkbloom reads versions 1 to " + MANIFEST_VERSION);
      }
      final Manifest m = new Manifest();
      m.nextId = in.readLong();
      m.metadata = new byte[in.readInt()];
      in.readFully(m.metadata);
      // All parts of a snapshot share their clock, which the metadata holds.
      final boolean metadataBeforeClock =
          version < 3 && NativeWindowShards.partsBeforeClock(m.metadata);
      final int count = in.readInt();
      for (int i = 0; i < count; ++i) {
        final long period = in.readLong();
        final int part = in.readInt();
        final long blocks = in.readLong();
        final boolean beforeClock = version >= 3 ? in.readBoolean() : metadataBeforeClock;
        final long bytes = in.readLong();
        final long id = in.readLong();
        final byte[] present = new byte[in.readInt()];
        in.readFully(present);
        final Part p =
            new Part(period, part, blocks, beforeClock, bytes, id, BitSet.valueOf(present));
        if (version >= 5) {
          p.folded = in.readInt();
          p.covered = in.readInt();
          p.coveredBytes = in.readLong();
          p.logBytes = in.readLong();
          final int runs = in.readInt();
          for (int j = 0; j < runs; ++j) {
            p.logs.add(new LogRun(in.readLong(), in.readInt(), in.readInt()));
          }
        } else if (version >= 2) {
          // Each log listed with its bytes.
          p.folded = in.readInt();
          p.covered = in.readInt();
          final int logs = in.readInt();
          for (int j = 0; j < logs; ++j) {
            final long logId = in.readLong();
            final long logBytes = in.readLong();
            p.addLog(logId, chunksOf(logBytes), logBytes);
            if (j < p.covered) {
              p.coveredBytes += logBytes;
            }
          }
        }
        m.parts.add(p);
      }
      if (version == 1) {
        // Version 1 lists the open part's logs after the parts, each as a part is listed.
        final int logs = in.readInt();
        for (int j = 0; j < logs; ++j) {
          in.readLong(); // period, part, blocks and bytes: the open part's
          in.readInt();
          in.readLong();
          final long bytes = in.readLong();
          final long id = in.readLong();
          in.readFully(new byte[in.readInt()]);
          m.open().addLog(id, chunksOf(bytes), bytes);
        }
      }
      return m;
    }
  }

  private final NativeWindowShards window;
  private final ShardRouting routing;
  private final KeyContext keys;
  private final ValueState<byte[]> manifestState;
  private final MapState<Long, byte[]> chunkState;
  // Per shard: its manifest as last read or written (null: nothing stored yet), and whether the
  // shard's change log runs from exactly that state (so that the next log continues it).
  private final Manifest[] manifests;
  private final boolean[] synced;
  // Per shard: made empty with its change log running, and not snapshotted since: every part
  // that was not open since is all zero (parts open since come with their logs).
  private final boolean[] startedEmpty;
  // Log bytes written since the last fold().
  private long loggedSinceFold;
  // What the restores so far read and the task thread's time in each step, for the log.
  private long restoredBaseBytes;
  private long restoredLogBytes;
  private final StepTime baseRead = new StepTime();
  private final StepTime logRead = new StepTime();
  private final StepTime replay = new StepTime();
  private final StepTime restore = new StepTime();

  /**
   * The time a step of restores took on the task thread, elapsed and the thread's CPU time (which
   * a loaded machine does not inflate by the other threads' share of the cores).
   */
  private static final class StepTime {
    private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();
    long wallNanos;
    long cpuNanos;
    private long wallStart;
    private long cpuStart;

    void start() {
      wallStart = System.nanoTime();
      cpuStart = THREADS.getCurrentThreadCpuTime();
    }

    void stop() {
      wallNanos += System.nanoTime() - wallStart;
      cpuNanos += THREADS.getCurrentThreadCpuTime() - cpuStart;
    }

    String describe(long lessWall, long lessCpu) {
      return (wallNanos - lessWall) / 1_000_000 + " ms (" + (cpuNanos - lessCpu) / 1_000_000
          + " ms CPU)";
    }
  }

  ShardStates(
      AbstractStreamOperator<?> operator, NativeWindowShards window, ShardRouting routing)
      throws Exception {
    this(
        operator,
        operator
            .getKeyedStateStore()
            .getState(
                new ValueStateDescriptor<>(
                    "bulkbloom-shard", BytePrimitiveArraySerializer.INSTANCE)),
        operator
            .getKeyedStateStore()
            .getMapState(
                new MapStateDescriptor<>(
                    "bulkbloom-chunks",
                    LongSerializer.INSTANCE,
                    BytePrimitiveArraySerializer.INSTANCE)),
        window,
        routing);
  }

  /**
   * The shards of {@code window} in the states {@code manifestState} and {@code chunkState}, which
   * hold the value of the key {@code keys} sets: the operator's keyed state above, or a test's.
   */
  ShardStates(
      KeyContext keys,
      ValueState<byte[]> manifestState,
      MapState<Long, byte[]> chunkState,
      NativeWindowShards window,
      ShardRouting routing) {
    this.window = window;
    this.routing = routing;
    this.keys = keys;
    this.manifestState = manifestState;
    this.chunkState = chunkState;
    manifests = new Manifest[routing.numShards()];
    synced = new boolean[routing.numShards()];
    startedEmpty = new boolean[routing.numShards()];
  }

  /**
   * Says that shard {@code shard} was just made empty with its change log running, so that its
   * first snapshot writes no bits of the parts that were never open (a fresh window's 1.5 GB of
   * zeros would otherwise be read on the task thread).
   */
  void startedEmpty(int shard) {
    startedEmpty[shard] = true;
  }

  static long chunkKey(long id, int chunk) {
    return (id << CHUNK_INDEX_BITS) | chunk;
  }

  /**
   * The fraction of its bytes that a part's logs of shard {@code shard} may reach before its base
   * is folded: 3/4 to 5/4 (past its bytes the base is smaller to store and quicker to restore
   * than the logs), spread over the shards by the golden ratio, so that shards filling at the same
   * rate fold at different checkpoints.
   */
  static double foldFraction(int shard) {
    final double spread = shard * 0.6180339887498949;
    return 0.75 + 0.5 * (spread - Math.floor(spread));
  }

  /**
   * Holds shard {@code shard} as its keyed state describes it, with its change log running;
   * returns false, holding nothing new, when the state holds no such shard.
   */
  boolean restore(int shard) throws Exception {
    restore.start();
    keys.setCurrentKey(routing.keyOfShard(shard));
    final byte[] encoded = manifestState.value();
    if (encoded == null) {
      return false;
    }
    final Manifest m = Manifest.decode(encoded, shard);
    window.restore(
        shard,
        m.metadata,
        (index, period, part, blocks, offset, length) -> {
          final Part stored = index < m.parts.size() ? m.parts.get(index) : null;
          if (stored == null
              || stored.period != period
              || stored.part != part
              || stored.blocks != blocks) {
            throw new IllegalStateException(
                "bulkbloom: the keyed state of shard " + shard + " stores no part " + index
                    + " (period " + period + ", part " + part + ", " + blocks + " blocks)");
          }
          final int chunk = (int) (offset / CHUNK_BYTES);
          if (!stored.present.get(chunk)) {
            return null;
          }
          baseRead.start();
          final byte[] bytes = chunk(shard, stored, stored.baseId, chunk);
          baseRead.stop();
          restoredBaseBytes += bytes.length;
          return bytes;
        },
        CHUNK_BYTES);
    for (int i = 0; i < m.parts.size(); ++i) {
      final Part p = m.parts.get(i);
      long read = 0;
      for (LogRun run : p.logs) {
        for (long id = run.first(); id < run.first() + run.count(); ++id) {
          for (int chunk = 0; chunk < run.chunks(); ++chunk) {
            logRead.start();
            final byte[] bytes = chunk(shard, p, id, chunk);
            logRead.stop();
            replay.start();
            window.replay(shard, i, bytes);
            replay.stop();
            read += bytes.length;
          }
        }
      }
      if (read != p.logBytes) {
        throw new IllegalStateException(
            "bulkbloom: the keyed state of shard " + shard + " holds " + read
                + " bytes of logs of part " + i + " (period " + p.period + ", part " + p.part
                + "), but its manifest lists " + p.logBytes);
      }
      restoredLogBytes += read;
    }
    window.enableChangeLog(shard);
    manifests[shard] = m;
    synced[shard] = true;
    restore.stop();
    return true;
  }

  /**
   * What the restores so far cost, for the log: the bytes of bases (as stored: packed chunks
   * count their packed bytes) and logs read from keyed state,
   * the time reading them, the rest of a base's restore (the window's construction and the copies
   * into it) and the logs' replay.
   */
  String restoreCost() {
    return restoredBaseBytes + " bytes of bases as stored and " + restoredLogBytes + " of logs in "
        + restore.describe(0, 0) + ": reading keyed state " + baseRead.describe(0, 0)
        + " (bases) + " + logRead.describe(0, 0) + " (logs), replaying logs "
        + replay.describe(0, 0) + ", the window's construction and copies "
        + restore.describe(
            baseRead.wallNanos + logRead.wallNanos + replay.wallNanos,
            baseRead.cpuNanos + logRead.cpuNanos + replay.cpuNanos);
  }

  private byte[] chunk(int shard, Part p, long id, int chunk) throws Exception {
    final byte[] bytes = chunkState.get(chunkKey(id, chunk));
    if (bytes == null) {
      throw new IllegalStateException(
          "bulkbloom: the keyed state of shard " + shard + " lacks chunk " + chunk + " of image "
              + id + " (period " + p.period + ", part " + p.part + ")");
    }
    return bytes;
  }

  /**
   * Brings shard {@code shard}'s keyed state up to the shard as it is now: the logs of its open
   * part and of the parts that closed, the bits of the parts no log tells, without what the shard
   * no longer holds. Adds the bytes written to {@code moved}. Every held shard takes its snapshot
   * before {@link #fold} in one checkpoint.
   */
  void snapshot(int shard, Moved moved) throws Exception {
    keys.setCurrentKey(routing.keyOfShard(shard));
    final Manifest before = manifests[shard];
    final boolean continues = synced[shard] && before != null;
    final boolean zeroUnlogged = startedEmpty[shard] && before == null;
    // Until this state is written, the next log would not continue a stored one.
    synced[shard] = false;
    startedEmpty[shard] = false;
    window.enableChangeLog(shard);
    final Snapshot snapshot = window.takeSnapshot(shard, Long.MAX_VALUE, CHUNK_BYTES);
    final Manifest next = new Manifest();
    next.nextId = before == null ? 1 : before.nextId;
    next.metadata = snapshot.metadata;
    final Part wasOpen = continues ? before.open() : null;
    final int open = snapshot.numParts() - 1;
    for (int i = 0; i <= open; ++i) {
      final Part held = before == null ? null : before.find(snapshot, i);
      int change = Snapshot.REWRITTEN;
      byte[][] log = null;
      boolean closed = i == open;
      if (i == open) {
        change = snapshot.change;
        log = snapshot.log;
      }
      for (int j = 0; j < snapshot.numClosed() && !closed; ++j) {
        if (snapshot.closedIs(j, i)) {
          closed = true;
          change = snapshot.closedChange(j);
          log = snapshot.closedLog(j);
        }
      }
      Part part = null;
      if (!closed && zeroUnlogged) {
        part = new Part(snapshot, i, next.nextId++, new BitSet());
      } else if (!closed) {
        // Sealed when stored: unchanged since (a part open then is listed as closed, if logged).
        part = held != null && held != before.open() ? held.copy() : null;
      } else if (log != null && change == Snapshot.SINCE_TAKEN) {
        if (held != null
            && held == wasOpen
            && (i < open || held.logBytes + logBytes(log) <= MAX_LOG_FRACTION * held.bytes)) {
          part = held.copy();
        }
      } else if (log != null && change == Snapshot.SINCE_EMPTY) {
        part = new Part(snapshot, i, next.nextId++, new BitSet());
      }
      if (part == null) {
        // Its bits as a new base with no logs: a fold of a zero base with an unlimited budget.
        part = new Part(snapshot, i, next.nextId++, new BitSet());
        part.folded = 0;
        moved.bases += refold(shard, i, part, Long.MAX_VALUE).written();
      } else if (log != null && log.length > 0) {
        final long id = next.nextId++;
        for (int chunk = 0; chunk < log.length; ++chunk) {
          chunkState.put(chunkKey(id, chunk), log[chunk]);
        }
        part.addLog(id, log.length, logBytes(log));
        moved.logs += logBytes(log);
        loggedSinceFold += logBytes(log);
      }
      next.parts.add(part);
    }
    removeUnlisted(before, next);
    moved.manifests += store(shard, next);
    synced[shard] = true;
  }

  private long store(int shard, Manifest m) throws Exception {
    final byte[] encoded = m.encode();
    manifestState.update(encoded);
    manifests[shard] = m;
    return encoded.length;
  }

  private static long logBytes(byte[][] log) {
    long total = 0;
    for (byte[] chunk : log) {
      total += chunk.length;
    }
    return total;
  }

  /**
   * Folds bases of the held shards {@code first} to {@code last}, just snapshotted: reads at most
   * {@link #FOLD_BYTES_PER_CHECKPOINT} plus twice the logs written since the last fold (one chunk
   * more) of the bits of the parts whose logs passed
   * their fold fraction and of folds in progress, the largest logs for their bytes first. Adds
   * the bytes written to {@code moved}.
   */
  void fold(int first, int last, Moved moved) throws Exception {
    final List<Due> due = new ArrayList<>();
    for (int shard = first; shard <= last; ++shard) {
      final Manifest m = manifests[shard];
      for (int i = 0; m != null && i < m.parts.size(); ++i) {
        final Part p = m.parts.get(i);
        final double ratio = (double) p.logBytes / p.bytes;
        if (p.folded >= 0 || (!p.logs.isEmpty() && ratio > foldFraction(shard))) {
          due.add(new Due(shard, i, ratio));
        }
      }
    }
    due.sort(Comparator.comparingDouble(Due::ratio).reversed());
    long budget = FOLD_BYTES_PER_CHECKPOINT + 2 * loggedSinceFold;
    loggedSinceFold = 0;
    for (int k = 0; k < due.size() && budget > 0; ++k) {
      final int shard = due.get(k).shard();
      final int index = due.get(k).index();
      keys.setCurrentKey(routing.keyOfShard(shard));
      final Part p = manifests[shard].parts.get(index);
      if (p.folded < 0) {
        p.folded = 0;
        p.covered = p.logCount();
        p.coveredBytes = p.logBytes;
      }
      final Refolded r = refold(shard, index, p, budget);
      budget -= r.read();
      moved.bases += r.written();
      moved.manifests += store(shard, manifests[shard]);
    }
  }

  private record Due(int shard, int index, double ratio) {}

  /** What {@link #refold} did: the bytes of part bits it read, and of chunks it wrote. */
  private record Refolded(long read, long written) {}

  /**
   * Rewrites part {@code p}'s base from the bits of part {@code index} of shard {@code shard}'s
   * last snapshot, from chunk {@code p.folded} on, while fewer than {@code budget} bytes of bits
   * were read; all-zero chunks are not stored. When the last chunk is rewritten, the first {@code
   * p.covered} logs go and the fold ends. The one way bases are written: a fold a few chunks a
   * checkpoint, a part written whole (no log kept) with an unlimited budget.
   */
  private Refolded refold(int shard, int index, Part p, long budget) throws Exception {
    long read = 0;
    long written = 0;
    while (p.folded < chunksOf(p.bytes) && read < budget) {
      final long offset = (long) p.folded * CHUNK_BYTES;
      final int length = (int) Math.min(CHUNK_BYTES, p.bytes - offset);
      final byte[] stored = window.storedChunk(shard, index, offset, length);
      if (stored != null) {
        chunkState.put(chunkKey(p.baseId, p.folded), stored);
        p.present.set(p.folded);
        written += stored.length;
      }
      read += length;
      ++p.folded;
    }
    if (p.folded == chunksOf(p.bytes)) {
      for (LogRun run : p.dropFirstLogs(p.covered, p.coveredBytes)) {
        removeLogs(run);
      }
      p.folded = -1;
      p.covered = 0;
      p.coveredBytes = 0;
    }
    return new Refolded(read, written);
  }

  private void removeLogs(LogRun run) throws Exception {
    for (long id = run.first(); id < run.first() + run.count(); ++id) {
      for (int chunk = 0; chunk < run.chunks(); ++chunk) {
        chunkState.remove(chunkKey(id, chunk));
      }
    }
  }

  /** Removes the chunks of the bases and logs {@code before} lists and {@code next} does not. */
  private void removeUnlisted(Manifest before, Manifest next) throws Exception {
    if (before == null) {
      return;
    }
    final Set<Long> kept = new HashSet<>();
    for (Part p : next.parts) {
      kept.add(p.baseId);
      for (LogRun run : p.logs) {
        for (long id = run.first(); id < run.first() + run.count(); ++id) {
          kept.add(id);
        }
      }
    }
    for (Part p : before.parts) {
      if (!kept.contains(p.baseId)) {
        for (int chunk = p.present.nextSetBit(0); chunk >= 0; chunk = p.present.nextSetBit(chunk + 1)) {
          chunkState.remove(chunkKey(p.baseId, chunk));
        }
      }
      for (LogRun run : p.logs) {
        for (long id = run.first(); id < run.first() + run.count(); ++id) {
          if (!kept.contains(id)) {
            removeLogs(new LogRun(id, 1, run.chunks()));
          }
        }
      }
    }
  }
}
