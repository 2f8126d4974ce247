package org.bulkbloom.flink;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * {@link ShardStates} over parts of several MiB, larger than a checkpoint's fold budget, without a
 * MiniCluster: the keyed state is a map per Flink key. Keys go in a few thousand a checkpoint, so
 * a base's fold runs chunk by chunk over several checkpoints; at each checkpoint of a fold (and now
 * and then between folds) the state is copied and restored into fresh shards (a partly folded base
 * plus every log; once the fold ends, the base alone), which must have the window file bytes of
 * shards that never stopped, and every other checkpoint in mid-fold the run goes on from the
 * restored copy (a failover). Then no fold runs until the logs pass four times a part's bytes: the
 * part is written whole, its logs dropped, and restores as exactly.
 */
public final class RefoldTest {
  static final int SHARDS = 2;
  static final long WINDOW = 100;
  static final int GENERATIONS = 4;
  static final double FPR = 0.01;
  // Parts of about 11 MiB a shard: three checkpoints' fold budget at least.
  static final long CAPACITY = 40_000_000;
  static final long SEED = 7;
  // New keys a checkpoint: 128 KiB of logs, little beside the fold's 4 MiB.
  private static final int BATCH = 16_384;

  private static void assertMoved(ShardStates.Moved moved, MemoryKeyedState store, String what) {
    final long put = store.put.values().stream().mapToLong(Long::longValue).sum();
    assertTrue(
        moved.logs + moved.bases == put && moved.manifests == store.manifestBytes,
        what + " counted " + moved.logs + " + " + moved.bases + " bytes of chunks and "
            + moved.manifests + " of manifests; the state got " + put + " and "
            + store.manifestBytes);
  }

  /** Shards with their keyed state, as one operator instance holds them. */
  static final class Held implements AutoCloseable {
    final NativeWindowShards window = newWindow();
    final MemoryKeyedState store;
    final ShardStates states;

    Held(MemoryKeyedState store, ShardRouting routing) {
      this.store = store;
      states =
          new ShardStates(store, store.manifestState(), store.chunkState(), window, routing);
    }

    @Override
    public void close() {
      window.close();
    }
  }

  static NativeWindowShards newWindow() {
    return new NativeWindowShards(WINDOW, 0, GENERATIONS, FPR, CAPACITY, SEED, SHARDS, false, 0);
  }

  /** Restores every shard from a copy of {@code from}; checks each against {@code same}. */
  static Held restore(
      MemoryKeyedState from, ShardRouting routing, NativeWindowShards same, String when)
      throws Exception {
    final Held to = new Held(from.copy(), routing);
    for (int s = 0; s < SHARDS; ++s) {
      assertTrue(to.states.restore(s), when + ": no state of shard " + s);
      assertArrayEquals(
          same.bytes(s),
          to.window.bytes(s),
          when + ": shard " + s + " restored differs from the uninterrupted one");
    }
    return to;
  }

  /** Dedups {@code n} new keys from {@code next} at clock 0 in {@code windows}. */
  static void insert(long next, int n, NativeWindowShards... windows) {
    final long[] keys = new long[n];
    final long[] clocks = new long[n];
    for (int i = 0; i < n; ++i) {
      keys[i] = next + i;
    }
    for (NativeWindowShards w : windows) {
      w.dedup(keys, w.shardOf(keys), clocks, n, new byte[n]);
    }
  }

  @Test
  void foldsOverSeveralCheckpointsRestoreExactly() throws Exception {
    final NativeWindowShards.Sizing sizing =
        NativeWindowShards.size(WINDOW, 0, GENERATIONS, FPR, CAPACITY, SEED, SHARDS, false);
    final ShardRouting routing =
        new ShardRouting(sizing.numBlocks, sizing.blockIndex == 1, SEED, SHARDS);
    final long partBytes;
    try (NativeWindowShards probe = newWindow()) {
      probe.addEmpty(0);
      final NativeWindowShards.Snapshot empty =
          probe.takeSnapshot(0, Long.MAX_VALUE, ShardStates.CHUNK_BYTES);
      partBytes = empty.bytes(empty.numParts() - 1);
    }
    assertTrue(
        partBytes > 2 * (ShardStates.FOLD_BYTES_PER_CHECKPOINT + 2 * 8L * BATCH),
        "a part of " + partBytes + " bytes folds in fewer than three checkpoints");
    Held live = new Held(new MemoryKeyedState(), routing);
    try (NativeWindowShards uninterrupted = newWindow()) {
      for (int s = 0; s < SHARDS; ++s) {
        uninterrupted.addEmpty(s);
        live.window.addEmpty(s);
        live.window.enableChangeLog(s);
        live.states.startedEmpty(s);
      }
      long next = 0;
      // Per shard: checkpoints of the fold in progress (0: none), and of the longest that ended.
      final int[] folding = new int[SHARDS];
      final int[] longest = new int[SHARDS];
      int midFold = 0;
      for (int checkpoint = 1; longest[0] < 3 || longest[1] < 3; ++checkpoint) {
        assertTrue(checkpoint < 1_000, "no fold of both shards spanned three checkpoints");
        insert(next, BATCH, uninterrupted, live.window);
        next += BATCH;
        live.store.put.clear();
        live.store.manifestBytes = 0;
        final ShardStates.Moved snapshotted = new ShardStates.Moved();
        for (int s = 0; s < SHARDS; ++s) {
          live.states.snapshot(s, snapshotted);
        }
        // What the checkpoint's log line says it moved is what went into the state.
        assertMoved(snapshotted, live.store, "snapshots of checkpoint " + checkpoint);
        assertTrue(snapshotted.logs > 0, "checkpoint " + checkpoint + " logged nothing");
        live.store.put.clear();
        live.store.manifestBytes = 0;
        live.store.removed.clear();
        final ShardStates.Moved folded = new ShardStates.Moved();
        live.states.fold(0, SHARDS - 1, folded);
        assertMoved(folded, live.store, "folds of checkpoint " + checkpoint);
        assertTrue(folded.logs == 0, "folds of checkpoint " + checkpoint + " counted logs");
        boolean inProgress = false;
        boolean ended = false;
        for (int s = 0; s < SHARDS; ++s) {
          final Object key = routing.keyOfShard(s);
          if (live.store.put.getOrDefault(key, 0L) > 0) {
            ++folding[s];
          }
          // A fold that ends drops the logs it covers.
          if (live.store.removed.getOrDefault(key, 0L) > 0) {
            longest[s] = Math.max(longest[s], folding[s]);
            folding[s] = 0;
            ended = true;
          }
          inProgress |= folding[s] > 0;
        }
        // Restores take a while: in and just after folds, and now and then between them.
        if (!inProgress && !ended && checkpoint % 16 != 0) {
          continue;
        }
        final String when = "checkpoint " + checkpoint + " (" + next + " keys)";
        final Held restored = restore(live.store, routing, uninterrupted, when);
        if (inProgress && ++midFold % 2 == 0) {
          live.close();
          live = restored;
        } else {
          restored.close();
        }
      }
      assertTrue(midFold >= 4, "restored in mid-fold " + midFold + " times");
      System.out.println(
          "folds of parts of " + partBytes + " bytes over " + longest[0] + " and " + longest[1]
              + " checkpoints; " + midFold + " restores in mid-fold, every other one going on; "
              + next + " keys");

      // Folds that do not keep up (here: none at all) let the logs pass four times a part's
      // bytes; then the part is written whole at its snapshot and its logs dropped. Each
      // checkpoint logs half a part, less than a log may hold.
      final int half = (int) (partBytes / 8 / 2 * SHARDS);
      final boolean[] whole = new boolean[SHARDS];
      for (int checkpoint = 1; !whole[0] || !whole[1]; ++checkpoint) {
        assertTrue(checkpoint <= 12, "no part written whole after " + checkpoint + " checkpoints");
        insert(next, half, uninterrupted, live.window);
        next += half;
        live.store.removed.clear();
        for (int s = 0; s < SHARDS; ++s) {
          live.states.snapshot(s, new ShardStates.Moved());
          whole[s] |= live.store.removed.getOrDefault(routing.keyOfShard(s), 0L) > 0;
        }
        restore(live.store, routing, uninterrupted, "unfolded checkpoint " + checkpoint).close();
      }
    } finally {
      live.close();
    }
  }
}
