package org.bulkbloom.flink.tests;

import static org.bulkbloom.flink.tests.Records.expect;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.bulkbloom.jni.NativeWindowShards;
import org.bulkbloom.jni.NativeWindowShards.Snapshot;
import org.junit.jupiter.api.Test;

/**
 * The incremental state calls of the JNI binding: over many checkpoints with rotations and jumps,
 * shards kept as each snapshot's parts, the open part's base (or zero bits) and the logs taken
 * since, restored into a fresh set and replayed, have the window file bytes of the shards that
 * never stopped. Damaged input reaches Java as exceptions.
 */
public final class NativeSnapshotTest {
  private static final int SHARDS = 4;
  // Small, so that every part comes in several chunks and the last is short.
  private static final int CHUNK = 64;

  /** One shard as a checkpoint store would keep it. */
  private static final class Stored {
    byte[] metadata;
    List<byte[][]> parts = new ArrayList<>();
    final List<byte[]> logs = new ArrayList<>();
  }

  private static NativeWindowShards newSet() {
    return new NativeWindowShards(100, 0, 4, 0.01, 20_000, 7, SHARDS, true, 0);
  }

  private static byte[][] copyPart(NativeWindowShards window, int shard, Snapshot s, int i) {
    final int chunks = (int) ((s.bytes(i) + CHUNK - 1) / CHUNK);
    final byte[][] out = new byte[chunks][];
    for (int c = 0; c < chunks; ++c) {
      final byte[] piece = new byte[(int) Math.min(CHUNK, s.bytes(i) - (long) c * CHUNK)];
      out[c] = window.copyPart(shard, i, (long) c * CHUNK, piece) ? piece : null;
    }
    return out;
  }

  private static void restore(NativeWindowShards into, int shard, Stored stored) {
    into.restore(
        shard,
        stored.metadata,
        (index, period, part, blocks, offset, length) -> {
          final byte[] piece = stored.parts.get(index)[(int) (offset / CHUNK)];
          assertTrue(piece == null || piece.length == length, "chunk length " + length);
          return piece;
        },
        CHUNK);
    for (byte[] log : stored.logs) {
      into.replay(shard, log);
    }
  }

  /**
   * A take after many rotations hands over a log for each part that closed since the last one;
   * ctest's -Xcheck:jni fails the test if the call leaves more local references than its frame
   * holds (one was left a closed part, and HotSpot's frame holds 32).
   */
  @Test
  void manyPartsClosedBetweenTakes() {
    try (NativeWindowShards live = new NativeWindowShards(480, 0, 48, 0.01, 2_000_000, 7, 1, false, 0)) {
      live.addEmpty(0);
      live.enableChangeLog(0);
      live.takeSnapshot(0, Long.MAX_VALUE, CHUNK);
      final long[] keys = new long[10];
      final long[] clocks = new long[keys.length];
      for (long t = 0; t < 480; t += 4) {
        for (int i = 0; i < keys.length; ++i) {
          keys[i] = t * 100 + i;
          clocks[i] = t;
        }
        live.dedup(keys, live.shardOf(keys), clocks, keys.length, new byte[keys.length]);
      }
      final Snapshot snapshot = live.takeSnapshot(0, Long.MAX_VALUE, CHUNK);
      int logged = 0;
      for (int j = 0; j < snapshot.numClosed(); ++j) {
        logged += snapshot.closedChange(j) != Snapshot.REWRITTEN ? 1 : 0;
      }
      assertTrue(logged >= 40, logged + " of " + snapshot.numClosed() + " closed parts have logs");
    }
  }

  /**
   * A shard taken apart before its clock started marks its parts so, and its metadata tells it:
   * part 0 of period -1 then is not the part of period -1 with keys after the clock starts there.
   */
  @Test
  void partsBeforeTheClockAreMarked() {
    try (NativeWindowShards live = newSet()) {
      for (int s = 0; s < SHARDS; ++s) {
        live.addEmpty(s);
        live.enableChangeLog(s);
      }
      final Snapshot before = live.takeSnapshot(0, Long.MAX_VALUE, CHUNK);
      assertTrue(NativeWindowShards.partsBeforeClock(before.metadata));
      final int open = before.numParts() - 1;
      for (int i = 0; i <= open; ++i) {
        assertTrue(before.beforeClock(i), "part " + i + " of a shard without a clock");
      }
      final long[] keys = new long[200];
      for (int i = 0; i < keys.length; ++i) {
        keys[i] = i;
      }
      // Periods are 34 units: the clock starts in period -1, then moves to period 0.
      final long[] clocks = new long[keys.length];
      Arrays.fill(clocks, -1);
      live.dedup(keys, live.shardOf(keys), clocks, keys.length, new byte[keys.length]);
      live.advanceTo(0);
      final Snapshot after = live.takeSnapshot(0, Long.MAX_VALUE, CHUNK);
      assertTrue(!NativeWindowShards.partsBeforeClock(after.metadata));
      final int sealed = after.numParts() - 2;
      assertTrue(after.period(sealed) == -1 && before.period(open - 1) == -1,
          "period " + after.period(sealed) + " and " + before.period(open - 1));
      assertTrue(after.part(sealed) == before.part(open - 1)
          && after.blocks(sealed) == before.blocks(open - 1));
      assertTrue(!after.beforeClock(sealed), "a part of period -1 after the clock started");
      final byte[] damaged = after.metadata.clone();
      damaged[damaged.length / 2] ^= 1;
      expect(IllegalArgumentException.class, "snapshot metadata",
          () -> NativeWindowShards.partsBeforeClock(damaged));
    }
  }

  @Test
  void restoredShardsEqualTheUninterruptedOnes() {
    final Random random = new Random(35);
    final int[] changes = new int[3];
    int logsTooLong = 0;
    int restores = 0;
    try (NativeWindowShards live = newSet()) {
      final Stored[] store = new Stored[SHARDS];
      for (int s = 0; s < SHARDS; ++s) {
        live.addEmpty(s);
        live.enableChangeLog(s);
        store[s] = new Stored();
      }
      long clock = 0;
      long next = 0;
      for (int checkpoint = 1; checkpoint <= 80; ++checkpoint) {
        // A period is 34 units: rotations every few checkpoints, and now and then a jump past
        // the whole window.
        clock += checkpoint % 29 == 0 ? 250 : random.nextInt(12);
        final int n = 1 + random.nextInt(400);
        final long[] keys = new long[n];
        final long[] clocks = new long[n];
        for (int i = 0; i < n; ++i) {
          // Half repeats of recent keys, half new.
          keys[i] = random.nextBoolean() && next > 0 ? next - 1 - random.nextInt((int) Math.min(next, 3000)) : next++;
          clocks[i] = clock;
        }
        live.dedup(keys, live.shardOf(keys), clocks, n, new byte[n]);
        live.advanceTo(clock);
        for (int s = 0; s < SHARDS; ++s) {
          final Stored stored = store[s];
          // Now and then too little room for the log: the open part comes whole.
          final long maxLog = random.nextInt(10) == 0 ? 0 : Long.MAX_VALUE;
          final Snapshot snapshot = live.takeSnapshot(s, maxLog, CHUNK);
          ++changes[snapshot.change];
          stored.metadata = snapshot.metadata;
          final int open = snapshot.numParts() - 1;
          final List<byte[][]> parts = new ArrayList<>();
          for (int i = 0; i < open; ++i) {
            parts.add(copyPart(live, s, snapshot, i));
          }
          if (snapshot.log == null) {
            logsTooLong += snapshot.change == Snapshot.REWRITTEN ? 0 : 1;
            parts.add(copyPart(live, s, snapshot, open));
            stored.logs.clear();
          } else if (snapshot.change == Snapshot.SINCE_EMPTY) {
            parts.add(new byte[(int) ((snapshot.bytes(open) + CHUNK - 1) / CHUNK)][]);
            stored.logs.clear();
          } else {
            assertTrue(snapshot.change == Snapshot.SINCE_TAKEN, "change " + snapshot.change);
            parts.add(stored.parts.get(stored.parts.size() - 1));
          }
          if (snapshot.log != null) {
            for (byte[] log : snapshot.log) {
              assertTrue(log.length <= CHUNK && log.length % 8 == 0, "log chunk " + log.length);
              stored.logs.add(log);
            }
          }
          stored.parts = parts;
        }
        if (checkpoint % 4 == 0) {
          ++restores;
          try (NativeWindowShards copy = newSet()) {
            for (int s = 0; s < SHARDS; ++s) {
              restore(copy, s, store[s]);
              assertTrue(
                  Arrays.equals(copy.bytes(s), live.bytes(s)),
                  "checkpoint " + checkpoint + ": shard " + s + " restored from "
                      + store[s].parts.size() + " parts and " + store[s].logs.size()
                      + " logs differs from the uninterrupted shard");
            }
          }
        }
      }
      assertTrue(
          changes[Snapshot.SINCE_TAKEN] > 0 && changes[Snapshot.SINCE_EMPTY] > 0 && logsTooLong > 0,
          "the checkpoints never took a log of the same open part, of a new one, or one too long: "
              + Arrays.toString(changes) + ", " + logsTooLong);
      System.out.println(
          restores + " restores equal: logs since taken, since empty, rewritten "
              + Arrays.toString(changes) + "; " + logsTooLong + " too long");

      // Misuse and damage.
      final Snapshot snapshot = live.takeSnapshot(0, Long.MAX_VALUE, CHUNK);
      try (NativeWindowShards copy = newSet()) {
        expect(IllegalArgumentException.class, "8-byte hashes", () -> {
          copy.addEmpty(0);
          copy.replay(0, new byte[7]);
        });
        expect(IllegalArgumentException.class, "expected", () ->
            copy.restore(0, snapshot.metadata, (i, p, q, b, o, l) -> new byte[l + 1], CHUNK));
        expect(IllegalStateException.class, "from the source", () ->
            copy.restore(0, snapshot.metadata, (i, p, q, b, o, l) -> {
              throw new IllegalStateException("from the source");
            }, CHUNK));
        expect(IllegalArgumentException.class, "holds shard 0 of 4", () ->
            copy.restore(1, snapshot.metadata, (i, p, q, b, o, l) -> null, CHUNK));
        final byte[] damaged = snapshot.metadata.clone();
        damaged[damaged.length / 2] ^= 1;
        expect(IllegalArgumentException.class, "shard 2", () ->
            copy.restore(2, damaged, (i, p, q, b, o, l) -> null, CHUNK));
        expect(IllegalArgumentException.class, "multiple of 8", () ->
            live.takeSnapshot(0, 0, 12));
        expect(IllegalArgumentException.class, "outside part", () ->
            live.copyPart(0, 0, snapshot.bytes(0), new byte[1]));
      }
    }
  }
}
