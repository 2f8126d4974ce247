package org.bulkbloom.flink;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.BitSet;
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
 * and chunks of at most {@link #CHUNK_BYTES} (a {@code MapState<Long, byte[]>}). A sealed part is
 * written once, when it is first seen, and removed when the window drops it; the open part is a
 * base plus the logs taken at each checkpoint since, folded into a new base once the logs pass a
 * fraction of its bytes. All-zero chunks are not stored.
 *
 * <p>Everything here runs on the task thread and only moves bytes into the keyed state backend;
 * the backend makes them durable asynchronously (RocksDB and ForSt with incremental checkpoints
 * upload what changed; the hashmap backend copies all of it, as it does for any state).
 */
final class ShardStates {
  /** The most bytes of one stored chunk, a multiple of 8 (a log chunk holds whole hashes). */
  static final int CHUNK_BYTES = 1 << 20;

  private static final int MANIFEST_VERSION = 1;
  // A chunk's key: its storage's number times 2^24 plus its index (a part of up to 16 TiB).
  private static final int CHUNK_INDEX_BITS = 24;

  /** One stored image: a part's bits or a log, in chunks under storage number {@code id}. */
  private static final class Stored {
    final long period;
    final int part;
    final long blocks;
    final long bytes;
    final long id;
    // The chunks that are stored; the others are all zero. Every chunk of a log is stored.
    final BitSet present;

    Stored(long period, int part, long blocks, long bytes, long id, BitSet present) {
      this.period = period;
      this.part = part;
      this.blocks = blocks;
      this.bytes = bytes;
      this.id = id;
      this.present = present;
    }

    boolean isPart(Snapshot snapshot, int i) {
      return period == snapshot.period(i)
          && part == snapshot.part(i)
          && blocks == snapshot.blocks(i)
          && bytes == snapshot.bytes(i);
    }

    int chunks() {
      return (int) ((bytes + CHUNK_BYTES - 1) / CHUNK_BYTES);
    }

    long storedBytes() {
      long total = 0;
      for (int chunk = present.nextSetBit(0); chunk >= 0; chunk = present.nextSetBit(chunk + 1)) {
        total += Math.min(CHUNK_BYTES, bytes - (long) chunk * CHUNK_BYTES);
      }
      return total;
    }
  }

  /** What a shard's keyed state holds: the decoded manifest. */
  private static final class Manifest {
    long nextId = 1;
    byte[] metadata;
    // Every part, oldest first; the last is the open part's base.
    final List<Stored> parts = new ArrayList<>();
    // The open part's logs since its base, in order (period, part, blocks: the open part's).
    final List<Stored> logs = new ArrayList<>();

    long logBytes() {
      long total = 0;
      for (Stored log : logs) {
        total += log.bytes;
      }
      return total;
    }

    byte[] encode() throws IOException {
      final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      final DataOutputStream out = new DataOutputStream(bytes);
      out.writeInt(MANIFEST_VERSION);
      out.writeLong(nextId);
      out.writeInt(metadata.length);
      out.write(metadata);
      for (List<Stored> list : List.of(parts, logs)) {
        out.writeInt(list.size());
        for (Stored s : list) {
          out.writeLong(s.period);
          out.writeInt(s.part);
          out.writeLong(s.blocks);
          out.writeLong(s.bytes);
          out.writeLong(s.id);
          final byte[] present = s.present.toByteArray();
          out.writeInt(present.length);
          out.write(present);
        }
      }
      out.flush();
      return bytes.toByteArray();
    }

    static Manifest decode(byte[] encoded, int shard) throws IOException {
      final DataInputStream in = new DataInputStream(new ByteArrayInputStream(encoded));
      final int version = in.readInt();
      if (version != MANIFEST_VERSION) {
        throw new IllegalStateException(
            "bulkbloom: the keyed state of shard " + shard + " has manifest version " + version
                + "; this bulkbloom reads version " + MANIFEST_VERSION);
      }
      final Manifest m = new Manifest();
      m.nextId = in.readLong();
      m.metadata = new byte[in.readInt()];
      in.readFully(m.metadata);
      for (List<Stored> list : List.of(m.parts, m.logs)) {
        final int count = in.readInt();
        for (int i = 0; i < count; ++i) {
          final long period = in.readLong();
          final int part = in.readInt();
          final long blocks = in.readLong();
          final long bytes = in.readLong();
          final long id = in.readLong();
          final byte[] present = new byte[in.readInt()];
          in.readFully(present);
          list.add(new Stored(period, part, blocks, bytes, id, BitSet.valueOf(present)));
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

  ShardStates(
      AbstractStreamOperator<?> operator, NativeWindowShards window, ShardRouting routing)
      throws Exception {
    this.window = window;
    this.routing = routing;
    this.keys = operator;
    manifestState =
        operator
            .getKeyedStateStore()
            .getState(
                new ValueStateDescriptor<>(
                    "bulkbloom-shard", BytePrimitiveArraySerializer.INSTANCE));
    chunkState =
        operator
            .getKeyedStateStore()
            .getMapState(
                new MapStateDescriptor<>(
                    "bulkbloom-chunks",
                    LongSerializer.INSTANCE,
                    BytePrimitiveArraySerializer.INSTANCE));
    manifests = new Manifest[routing.numShards()];
    synced = new boolean[routing.numShards()];
  }

  private static long chunkKey(long id, int chunk) {
    return (id << CHUNK_INDEX_BITS) | chunk;
  }

  /**
   * The fraction of its open part's bytes that shard {@code shard}'s logs may reach before they
   * are folded into a new base: 3/4 to 5/4, spread over the shards by the golden ratio, so that
   * shards filling at the same rate fold at different checkpoints instead of all in one.
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
          final Stored stored = index < m.parts.size() ? m.parts.get(index) : null;
          if (stored == null
              || stored.period != period
              || stored.part != part
              || stored.blocks != blocks) {
            throw new IllegalStateException(
                "bulkbloom: the keyed state of shard " + shard + " stores no part " + index
                    + " (period " + period + ", part " + part + ", " + blocks + " blocks)");
          }
          final int chunk = (int) (offset / CHUNK_BYTES);
          return stored.present.get(chunk) ? chunk(shard, stored, chunk) : null;
        },
        CHUNK_BYTES);
    for (Stored log : m.logs) {
      for (int chunk = 0; chunk < log.chunks(); ++chunk) {
        window.replay(shard, chunk(shard, log, chunk));
      }
    }
    window.enableChangeLog(shard);
    manifests[shard] = m;
    synced[shard] = true;
    return true;
  }

  private byte[] chunk(int shard, Stored stored, int chunk) throws Exception {
    final byte[] bytes = chunkState.get(chunkKey(stored.id, chunk));
    if (bytes == null) {
      throw new IllegalStateException(
          "bulkbloom: the keyed state of shard " + shard + " lacks chunk " + chunk + " of image "
              + stored.id + " (period " + stored.period + ", part " + stored.part + ")");
    }
    return bytes;
  }

  /**
   * Brings shard {@code shard}'s keyed state up to the shard as it is now: writes the parts it
   * does not hold yet and the open part's new log (or a new base), removes what the shard no
   * longer needs. Returns the bytes written.
   */
  long snapshot(int shard) throws Exception {
    keys.setCurrentKey(routing.keyOfShard(shard));
    final Manifest before = manifests[shard];
    final boolean continues = synced[shard];
    // Until this state is written, the next log would not continue a stored one.
    synced[shard] = false;
    window.enableChangeLog(shard);
    final double fraction = foldFraction(shard);
    final long maxLog =
        before == null
            ? Long.MAX_VALUE
            : (long) (fraction * before.parts.get(before.parts.size() - 1).bytes);
    final Snapshot snapshot = window.takeSnapshot(shard, maxLog, CHUNK_BYTES);
    final Manifest next = new Manifest();
    next.nextId = before == null ? 1 : before.nextId;
    next.metadata = snapshot.metadata;
    long written = 0;
    final int open = snapshot.numParts() - 1;
    for (int i = 0; i < open; ++i) {
      Stored kept = null;
      if (before != null) {
        for (int j = 0; j + 1 < before.parts.size() && kept == null; ++j) {
          kept = before.parts.get(j).isPart(snapshot, i) ? before.parts.get(j) : null;
        }
      }
      if (kept == null) {
        kept = writePart(shard, snapshot, i, next.nextId++);
        written += kept.storedBytes();
      }
      next.parts.add(kept);
    }
    final long openBytes = snapshot.bytes(open);
    final long logBytes = snapshot.log == null ? Long.MAX_VALUE : logBytes(snapshot.log);
    final Stored base = before == null ? null : before.parts.get(before.parts.size() - 1);
    // The open part: the stored base and logs plus this log when they are its bits before this
    // log; a zero base plus this log when it started empty since; else (or once the logs would
    // pass the fold fraction) its bits as a new base.
    final boolean logged;
    if (continues
        && snapshot.log != null
        && base != null
        && base.isPart(snapshot, open)
        && snapshot.change == Snapshot.SINCE_TAKEN
        && before.logBytes() + logBytes <= fraction * openBytes) {
      next.parts.add(base);
      next.logs.addAll(before.logs);
      logged = true;
    } else if (snapshot.change == Snapshot.SINCE_EMPTY
        && snapshot.log != null
        && logBytes <= fraction * openBytes) {
      next.parts.add(
          new Stored(
              snapshot.period(open),
              snapshot.part(open),
              snapshot.blocks(open),
              openBytes,
              next.nextId++,
              new BitSet()));
      logged = true;
    } else {
      final Stored bits = writePart(shard, snapshot, open, next.nextId++);
      written += bits.storedBytes();
      next.parts.add(bits);
      logged = false;
    }
    if (logged && logBytes > 0) {
      final long id = next.nextId++;
      final BitSet all = new BitSet();
      for (int chunk = 0; chunk < snapshot.log.length; ++chunk) {
        chunkState.put(chunkKey(id, chunk), snapshot.log[chunk]);
        all.set(chunk);
      }
      next.logs.add(
          new Stored(
              snapshot.period(open), snapshot.part(open), snapshot.blocks(open), logBytes, id, all));
      written += logBytes;
    }
    removeUnlisted(before, next);
    final byte[] encoded = next.encode();
    manifestState.update(encoded);
    written += encoded.length;
    manifests[shard] = next;
    synced[shard] = true;
    return written;
  }

  private static long logBytes(byte[][] log) {
    long total = 0;
    for (byte[] chunk : log) {
      total += chunk.length;
    }
    return total;
  }

  /** Writes the non-zero chunks of part {@code i} of the snapshot under storage number id. */
  private Stored writePart(int shard, Snapshot snapshot, int i, long id) throws Exception {
    final long bytes = snapshot.bytes(i);
    final BitSet present = new BitSet();
    byte[] buffer = null;
    for (long offset = 0; offset < bytes; offset += CHUNK_BYTES) {
      final int length = (int) Math.min(CHUNK_BYTES, bytes - offset);
      if (buffer == null || buffer.length != length) {
        buffer = new byte[length];
      }
      if (window.copyPart(shard, i, offset, buffer)) {
        final int chunk = (int) (offset / CHUNK_BYTES);
        chunkState.put(chunkKey(id, chunk), buffer);
        present.set(chunk);
        // The hashmap backend keeps the array itself.
        buffer = null;
      }
    }
    return new Stored(
        snapshot.period(i), snapshot.part(i), snapshot.blocks(i), bytes, id, present);
  }

  /** Removes the chunks of the images {@code before} lists and {@code next} does not. */
  private void removeUnlisted(Manifest before, Manifest next) throws Exception {
    if (before == null) {
      return;
    }
    final Set<Long> kept = new HashSet<>();
    for (List<Stored> list : List.of(next.parts, next.logs)) {
      for (Stored s : list) {
        kept.add(s.id);
      }
    }
    for (List<Stored> list : List.of(before.parts, before.logs)) {
      for (Stored s : list) {
        if (!kept.contains(s.id)) {
          for (int chunk = s.present.nextSetBit(0); chunk >= 0; chunk = s.present.nextSetBit(chunk + 1)) {
            chunkState.remove(chunkKey(s.id, chunk));
          }
        }
      }
    }
  }
}
