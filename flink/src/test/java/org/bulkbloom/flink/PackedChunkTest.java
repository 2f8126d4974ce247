package org.bulkbloom.flink;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * Base chunks in keyed state, packed when that is shorter than their bits (docs/FORMAT.md "Flink
 * keyed state", manifest versions 4 and 5), without a MiniCluster: a sparse window's bases are stored
 * packed and a full one's as bits, and both restore to the window file bytes of the shards
 * written; state as manifest version 3 wrote it (every stored chunk its bits) restores as well;
 * a damaged packed chunk is refused, naming the shard, part and offset.
 */
public final class PackedChunkTest {
  private static final int SHARDS = 2;
  private static final long WINDOW = 100;
  private static final int GENERATIONS = 4;
  private static final double FPR = 0.01;
  private static final long SEED = 11;
  // Parts of about 11 MiB a shard: several chunks each.
  private static final long CAPACITY = 40_000_000;

  /** Shards of a window for {@code capacity} keys with their keyed state, as an operator holds. */
  private static final class Held implements AutoCloseable {
    final long capacity;
    final NativeWindowShards window;
    final ShardRouting routing;
    final MemoryKeyedState store;
    final ShardStates states;

    Held(long capacity, MemoryKeyedState store) {
      this.capacity = capacity;
      this.store = store;
      window =
          new NativeWindowShards(WINDOW, 0, GENERATIONS, FPR, capacity, SEED, SHARDS, false, 0);
      final NativeWindowShards.Sizing sizing =
          NativeWindowShards.size(WINDOW, 0, GENERATIONS, FPR, capacity, SEED, SHARDS, false);
      routing = new ShardRouting(sizing.numBlocks, sizing.blockIndex == 1, SEED, SHARDS);
      states =
          new ShardStates(store, store.manifestState(), store.chunkState(), window, routing);
    }

    @Override
    public void close() {
      window.close();
    }
  }

  /**
   * Shards of a window for {@code capacity} keys holding {@code keys} keys in their open part,
   * written into their keyed state whole (no change log: every part a base, no log).
   */
  private static Held written(long capacity, int keys) throws Exception {
    final Held held = new Held(capacity, new MemoryKeyedState());
    for (int s = 0; s < SHARDS; ++s) {
      held.window.addEmpty(s);
    }
    final long[] k = new long[keys];
    for (int i = 0; i < keys; ++i) {
      k[i] = 0x9E3779B97F4A7C15L * (i + 1);
    }
    held.window.dedup(k, held.window.shardOf(k), new long[keys], keys, new byte[keys]);
    for (int s = 0; s < SHARDS; ++s) {
      held.states.snapshot(s, new ShardStates.Moved());
    }
    return held;
  }

  /** A stored chunk of a base: its key in the map state, part, offset and the bits' length. */
  private record Chunk(long key, int part, long offset, int length) {}

  /** The stored base chunks of shard {@code shard}; makes the shard's Flink key current. */
  private static List<Chunk> baseChunks(Held held, int shard) throws Exception {
    held.store.setCurrentKey(held.routing.keyOfShard(shard));
    final ShardStates.Manifest m =
        ShardStates.Manifest.decode(held.store.manifests.get(held.store.key), shard);
    final List<Chunk> chunks = new ArrayList<>();
    for (int i = 0; i < m.parts.size(); ++i) {
      final ShardStates.Part p = m.parts.get(i);
      assertTrue(p.logs.isEmpty(), "shard " + shard + " part " + i + " has logs");
      for (int c = p.present.nextSetBit(0); c >= 0; c = p.present.nextSetBit(c + 1)) {
        final long offset = (long) c * ShardStates.CHUNK_BYTES;
        final int length = (int) Math.min(ShardStates.CHUNK_BYTES, p.bytes - offset);
        chunks.add(new Chunk(ShardStates.chunkKey(p.baseId, c), i, offset, length));
      }
    }
    return chunks;
  }

  private static byte[] stored(Held held, Chunk chunk) {
    return held.store.chunks.get(held.store.key).get(chunk.key());
  }

  /** Restores every shard from {@code state} into new shards: each must be {@code from}'s. */
  private static void assertRestores(Held from, MemoryKeyedState state, String what)
      throws Exception {
    try (Held to = new Held(from.capacity, state)) {
      for (int s = 0; s < SHARDS; ++s) {
        assertTrue(to.states.restore(s), what + ": no state of shard " + s);
        assertArrayEquals(
            from.window.bytes(s), to.window.bytes(s), what + ": shard " + s + " restored differs");
      }
    }
  }

  @Test
  void sparseBasesArePackedAndRestore() throws Exception {
    try (Held held = written(CAPACITY, 200_000)) {
      int chunks = 0;
      long bits = 0;
      long stored = 0;
      for (int s = 0; s < SHARDS; ++s) {
        for (Chunk c : baseChunks(held, s)) {
          final byte[] value = stored(held, c);
          assertTrue(
              value.length < c.length() && value[0] == 1,
              "shard " + s + ": a chunk of a sparse base is stored as " + value.length
                  + " bytes of its " + c.length() + ", tag " + value[0]);
          ++chunks;
          bits += c.length();
          stored += value.length;
        }
      }
      assertTrue(chunks >= 2 * SHARDS, "only " + chunks + " base chunks stored");
      System.out.println(chunks + " chunks of sparse bases: " + stored + " bytes for " + bits);
      assertRestores(held, held.store.copy(), "packed bases");
    }
  }

  @Test
  void fullBasesAreStoredAsBitsAndRestore() throws Exception {
    // Ten times the capacity in one period: the open part's bits mostly set.
    final long capacity = 400_000;
    try (Held held = written(capacity, 4_000_000)) {
      int chunks = 0;
      for (int s = 0; s < SHARDS; ++s) {
        for (Chunk c : baseChunks(held, s)) {
          assertEquals(
              c.length(),
              stored(held, c).length,
              "shard " + s + ": a chunk of a full base is not stored as its bits");
          ++chunks;
        }
      }
      assertTrue(chunks >= SHARDS, "only " + chunks + " base chunks stored");
      assertRestores(held, held.store.copy(), "bases stored as bits");
    }
  }

  @Test
  void version3StateRestores() throws Exception {
    try (Held held = written(CAPACITY, 200_000)) {
      // What the operator wrote before packing: every chunk its bits, manifest version 3 (the
      // same fields as version 4; no logs here).
      final MemoryKeyedState old = held.store.copy();
      int chunks = 0;
      for (int s = 0; s < SHARDS; ++s) {
        for (Chunk c : baseChunks(held, s)) {
          final byte[] bits = new byte[c.length()];
          assertTrue(held.window.copyPart(s, c.part(), c.offset(), bits), "an all-zero chunk");
          old.chunks.get(held.store.key).put(c.key(), bits);
          ++chunks;
        }
        final byte[] manifest =
            LogRunsTest.version4(
                ShardStates.Manifest.decode(held.store.manifests.get(held.store.key), s),
                held.store.chunks.get(held.store.key));
        ByteBuffer.wrap(manifest).putInt(0, 3);
        old.manifests.put(held.store.key, manifest);
      }
      assertTrue(chunks >= 2 * SHARDS, "only " + chunks + " base chunks stored");
      assertRestores(held, old, "version 3 state");
    }
  }

  @Test
  void damagedPackedChunksAreRefused() throws Exception {
    try (Held held = written(CAPACITY, 200_000)) {
      final Chunk first = baseChunks(held, 1).get(0);
      final byte[] packed = stored(held, first);
      // The chunk's bit count as the first gap: a bit past its end.
      final int past = first.length() * 8;
      final byte[][] damaged = {
        withFirst(packed, (byte) 2), append(packed, (byte) 0x80), packedGap(past),
      };
      final String[] says = {"tagged 2", "cut or too long", "sets bit " + past};
      for (int d = 0; d < damaged.length; ++d) {
        final MemoryKeyedState state = held.store.copy();
        state.chunks.get(held.store.key).put(first.key(), damaged[d]);
        try (Held to = new Held(held.capacity, state)) {
          final IllegalArgumentException e =
              assertThrows(IllegalArgumentException.class, () -> to.states.restore(1));
          final String message = e.getMessage();
          assertTrue(
              message.contains("shard 1")
                  && message.contains("at offset " + first.offset())
                  && message.contains(says[d]),
              "damage " + d + ": " + message);
        }
      }
    }
  }

  private static byte[] withFirst(byte[] bytes, byte first) {
    final byte[] out = bytes.clone();
    out[0] = first;
    return out;
  }

  /** A packed chunk (tag 1) of one gap, {@code gap}, as a LEB128 varint. */
  private static byte[] packedGap(long gap) {
    final ByteBuffer out = ByteBuffer.allocate(11);
    out.put((byte) 1);
    for (; gap >= 0x80; gap >>>= 7) {
      out.put((byte) (gap | 0x80));
    }
    out.put((byte) gap);
    return Arrays.copyOf(out.array(), out.position());
  }

  private static byte[] append(byte[] bytes, byte last) {
    final byte[] out = Arrays.copyOf(bytes, bytes.length + 1);
    out[bytes.length] = last;
    return out;
  }
}
