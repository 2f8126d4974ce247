package org.bulkbloom.flink.tests;

import static org.bulkbloom.flink.tests.Records.expect;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * The JNI binding on its own: batches over several shards keep each shard's sequential answers,
 * state bytes survive a round trip, the statistics behind the metrics move (read at once or a few
 * shards a step), and misuse reaches Java as exceptions carrying the library's message.
 */
public final class NativeApiTest {
  /** Shard {@code shard}'s bytes of an empty fixed-size window of NativeApiTest's options. */
  private static byte[] fixedBytes(int shards, int shard) {
    try (NativeWindowShards fixed =
        new NativeWindowShards(100, 0, 4, 0.01, 10_000, 0, shards, false, 0)) {
      fixed.addEmpty(shard);
      return fixed.bytes(shard);
    }
  }

  @Test
  void bindingOnItsOwn() {
    final int shards = 4;
    try (NativeWindowShards window = new NativeWindowShards(100, 0, 4, 0.01, 10_000, 0, shards, true, 0)) {
      for (int s = 0; s < shards; ++s) {
        window.addEmpty(s);
      }
      final double[] empty = window.stats();
      final NativeWindowShards.Sizing sizing = NativeWindowShards.size(100, 0, 4, 0.01, 10_000, 0, shards, true);
      assertTrue(empty[0] == sizing.memoryBytes, "state bytes " + empty[0] + " != " + sizing.memoryBytes);
      assertTrue(empty[2] == 0 && empty[3] == 0, "an empty window has fill and FPR 0");

      // Keys 0..999 then again: every second copy is a repeat, whatever its shard.
      final int n = 2000;
      final long[] keys = new long[n];
      final long[] clocks = new long[n];
      for (int i = 0; i < n; ++i) {
        keys[i] = i % 1000;
        clocks[i] = i / 100;
      }
      final int[] owners = window.shardOf(keys);
      final byte[] isNew = new byte[n];
      final int fresh = window.dedup(keys, owners, clocks, n, isNew);
      for (int i = 1000; i < n; ++i) {
        assertTrue(isNew[i] == 0, "the repeat of key " + keys[i] + " was called new");
      }
      assertTrue(fresh > 990 && fresh <= 1000, fresh + " of 1000 distinct keys new");
      final double[] filled = window.stats();
      assertTrue(filled[3] > 0 && filled[2] > 0, "fill and FPR stay 0 after 1000 keys");
      // The metrics' reading a shard a step (the least a step reads) gives the same stats once
      // it has read every held shard, twice in a row: each reading starts over.
      for (int reading = 0; reading < 2; ++reading) {
        final double[] stepped = new double[4];
        int steps = 1;
        while (!window.statsStep(1, stepped)) {
          ++steps;
        }
        assertTrue(steps == shards, "a reading of " + shards + " shards took " + steps + " steps");
        assertTrue(java.util.Arrays.equals(stepped, filled),
            "stepped stats " + java.util.Arrays.toString(stepped) + " != "
                + java.util.Arrays.toString(filled));
      }
      assertTrue(window.clock() == 19, "clock " + window.clock() + ", expected 19");

      // Every shard's bytes load into a fresh set and give the same answers.
      try (NativeWindowShards copy = new NativeWindowShards(100, 0, 4, 0.01, 10_000, 0, shards, true, 0)) {
        for (int s = 0; s < shards; ++s) {
          copy.load(s, window.bytes(s));
        }
        final byte[] again = new byte[n];
        final byte[] againCopy = new byte[n];
        window.dedup(keys, owners, clocks, n, again);
        copy.dedup(keys, owners, clocks, n, againCopy);
        assertTrue(java.util.Arrays.equals(again, againCopy), "a loaded copy answers differently");
        assertTrue(copy.clock() == window.clock(), "a loaded copy has another clock");
        expect(IllegalArgumentException.class, "holds shard 1 of 4", () -> copy.load(2, window.bytes(1)));
      }
      // Fixed-size shards (the state of operators before sizing per period) restore into fixed-size
      // shards only, and sized ones into sized ones: their layouts route keys differently.
      try (NativeWindowShards fixed = new NativeWindowShards(100, 0, 4, 0.01, 10_000, 0, shards, false, 0)) {
        expect(IllegalArgumentException.class, "restore it with BloomDedup.fixedSizeShards()",
            () -> window.load(0, fixedBytes(shards, 0)));
        expect(IllegalArgumentException.class, "restore it without fixedSizeShards()",
            () -> fixed.load(0, window.bytes(0)));
        fixed.load(0, fixedBytes(shards, 0));
      }
      try (NativeWindowShards other = new NativeWindowShards(200, 0, 4, 0.01, 10_000, 0, shards, true, 0)) {
        expect(IllegalArgumentException.class, "restore with the configuration",
            () -> other.load(0, window.bytes(0)));
        expect(IllegalStateException.class, "is not held by this subtask",
            () -> other.dedup(keys, owners, clocks, n, isNew));
      }
      expect(IllegalArgumentException.class, "the checkpointed state of shard 0: truncated",
          () -> window.load(0, "not a window".getBytes(StandardCharsets.UTF_8)));
      expect(IllegalArgumentException.class, "belongs to shard", () -> {
        final int[] wrong = owners.clone();
        wrong[5] = (wrong[5] + 1) % shards;
        window.dedup(keys, wrong, clocks, n, isNew);
      });
      window.close();
      expect(IllegalStateException.class, "closed", () -> window.advanceTo(5));
    }
    expect(IllegalArgumentException.class, "shard count 9 is out of range",
        () -> new NativeWindowShards(100, 0, 4, 0.01, 100, 0, 9, false, 0).close());
  }
}
