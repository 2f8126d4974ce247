package org.bulkbloom.flink;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.nio.ByteBuffer;
import java.util.Map;
import org.bulkbloom.flink.RefoldTest.Held;
import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * A part's logs in the manifest as runs of image numbers (docs/FORMAT.md "Flink keyed state",
 * manifest version 5), without a MiniCluster: checkpoints that only log leave every manifest the
 * same size, and state of manifest version 4 (each log listed with its bytes), written with logs
 * and a fold in progress, restores exactly, and its fold then ends and restores exactly too.
 */
public final class LogRunsTest {
  private static final int SHARDS = RefoldTest.SHARDS;
  private static final ShardRouting ROUTING;

  static {
    final NativeWindowShards.Sizing sizing =
        NativeWindowShards.size(
            RefoldTest.WINDOW,
            0,
            RefoldTest.GENERATIONS,
            RefoldTest.FPR,
            RefoldTest.CAPACITY,
            RefoldTest.SEED,
            SHARDS,
            false);
    ROUTING = new ShardRouting(sizing.numBlocks, sizing.blockIndex == 1, RefoldTest.SEED, SHARDS);
  }

  /** New shards, logging from the start, as a job with periodic checkpoints makes them. */
  private static Held started(NativeWindowShards uninterrupted) {
    final Held live = new Held(new MemoryKeyedState(), ROUTING);
    for (int s = 0; s < SHARDS; ++s) {
      uninterrupted.addEmpty(s);
      live.window.addEmpty(s);
      live.window.enableChangeLog(s);
      live.states.startedEmpty(s);
    }
    return live;
  }

  /** One checkpoint of {@code held}: every shard's snapshot, then the folds. */
  private static void checkpoint(Held held) throws Exception {
    final ShardStates.Moved moved = new ShardStates.Moved();
    for (int s = 0; s < SHARDS; ++s) {
      held.states.snapshot(s, moved);
    }
    held.states.fold(0, SHARDS - 1, moved);
  }

  private static ShardStates.Manifest manifest(Held held, int shard) throws Exception {
    held.store.setCurrentKey(ROUTING.keyOfShard(shard));
    return ShardStates.Manifest.decode(held.store.manifests.get(held.store.key), shard);
  }

  @Test
  void checkpointsThatOnlyLogKeepTheManifestsTheirSize() throws Exception {
    try (NativeWindowShards uninterrupted = RefoldTest.newWindow();
        Held live = started(uninterrupted)) {
      // 4096 new keys a checkpoint, 32 KiB of logs: no part's logs near its fold fraction.
      final int batch = 4096;
      final long[] sizes = new long[SHARDS];
      for (int checkpoint = 1; checkpoint <= 20; ++checkpoint) {
        RefoldTest.insert((long) checkpoint * batch, batch, uninterrupted, live.window);
        checkpoint(live);
        for (int s = 0; s < SHARDS; ++s) {
          final ShardStates.Manifest m = manifest(live, s);
          assertEquals(-1, m.open().folded, "a fold began at checkpoint " + checkpoint);
          assertEquals(checkpoint, m.open().logCount(), "shard " + s + "'s logs");
          final int size = live.store.manifests.get(live.store.key).length;
          if (checkpoint == 2) {
            sizes[s] = size;
          } else if (checkpoint > 2) {
            assertEquals(
                sizes[s],
                size,
                "shard " + s + "'s manifest after checkpoint " + checkpoint
                    + " against checkpoint 2");
          }
        }
      }
      RefoldTest.restore(live.store, ROUTING, uninterrupted, "after 20 checkpoints").close();
    }
  }

  /**
   * {@code m} as manifest version 4 wrote it: each log with its bytes, read from {@code chunks}
   * (version 3's fields too).
   */
  static byte[] version4(ShardStates.Manifest m, Map<Long, byte[]> chunks)
      throws Exception {
    final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    final DataOutputStream out = new DataOutputStream(bytes);
    m.writeHeader(out, 4);
    for (ShardStates.Part p : m.parts) {
      p.writeHead(out);
      out.writeInt(p.logCount());
      for (ShardStates.LogRun run : p.logs) {
        for (long id = run.first(); id < run.first() + run.count(); ++id) {
          long logBytes = 0;
          for (int c = 0; c < run.chunks(); ++c) {
            logBytes += chunks.get(ShardStates.chunkKey(id, c)).length;
          }
          out.writeLong(id);
          out.writeLong(logBytes);
        }
      }
    }
    out.flush();
    return bytes.toByteArray();
  }

  @Test
  void version4StateWithAFoldInProgressRestoresAndFolds() throws Exception {
    // 16384 new keys a checkpoint (128 KiB of logs): folds of 11 MiB parts span checkpoints.
    final int batch = 16_384;
    try (NativeWindowShards uninterrupted = RefoldTest.newWindow();
        Held live = started(uninterrupted)) {
      long next = 0;
      int checkpoint = 0;
      boolean midFold = false;
      while (!midFold) {
        assertTrue(++checkpoint < 1_000, "no fold in progress with logs after it");
        RefoldTest.insert(next, batch, uninterrupted, live.window);
        next += batch;
        checkpoint(live);
        for (int s = 0; s < SHARDS; ++s) {
          final ShardStates.Part open = manifest(live, s).open();
          midFold |= open.folded > 0 && open.covered > 0 && open.logCount() > open.covered;
        }
      }
      // The same state as version 4 wrote it.
      final MemoryKeyedState old = live.store.copy();
      for (int s = 0; s < SHARDS; ++s) {
        final ShardStates.Manifest m = manifest(live, s);
        final byte[] v5 = live.store.manifests.get(live.store.key);
        assertEquals(5, ByteBuffer.wrap(v5).getInt(0), "the manifest's version");
        old.manifests.put(live.store.key, version4(m, live.store.chunks.get(live.store.key)));
      }
      try (Held resumed = RefoldTest.restore(old, ROUTING, uninterrupted, "version 4 state")) {
        // Resumed from it, checkpoints go on until every fold in progress ended.
        boolean folding = true;
        for (int more = 1; folding; ++more) {
          assertTrue(more < 1_000, "the fold in progress never ended");
          RefoldTest.insert(next, batch, uninterrupted, resumed.window);
          next += batch;
          checkpoint(resumed);
          folding = false;
          for (int s = 0; s < SHARDS; ++s) {
            final ShardStates.Manifest m = manifest(resumed, s);
            final ShardStates.Part open = m.open();
            folding |= open.folded >= 0;
            long logged = 0;
            for (ShardStates.LogRun run : open.logs) {
              for (long id = run.first(); id < run.first() + run.count(); ++id) {
                for (int c = 0; c < run.chunks(); ++c) {
                  logged +=
                      resumed.store.chunks.get(resumed.store.key)
                          .get(ShardStates.chunkKey(id, c)).length;
                }
              }
            }
            assertEquals(logged, open.logBytes, "shard " + s + "'s log bytes after " + more);
          }
          final String when = "checkpoint " + more + " resumed";
          RefoldTest.restore(resumed.store, ROUTING, uninterrupted, when).close();
        }
      }
    }
  }
}
