package org.bulkbloom.flink.tests;

import java.util.TreeSet;
import org.bulkbloom.jni.NativeWindowShards;

/**
 * The decisions of the library's window shards on a whole stream in one process, for comparing
 * with the operator's where the command line sizes otherwise: every shard held by one {@link
 * NativeWindowShards}, records in stream order with the stream's running maximum time as each
 * one's clock, in batches of an odd size, every shard moved to the clock after each batch.
 */
final class LibraryReference {
  /**
   * The window options of the operator under test, in clock units; a generation budget of 0 bounds
   * nothing ({@link NativeWindowShards#generationBudget}).
   */
  record Window(
      long window,
      int generations,
      double fpr,
      long capacity,
      long maxCapacity,
      int shards,
      boolean sized,
      long generationBudget) {}

  /** What a run kept, the most bytes its shards held after a batch, and its sizing counts. */
  record Run(TreeSet<Long> kept, long peakBytes, long overfull, long capped) {}

  private static final int BATCH = 777;

  private LibraryReference() {}

  /** The ids of the records kept; record i has key {@code keys[i]} and time {@code times[i]}. */
  static TreeSet<Long> keptLongs(Window w, long[] keys, long[] times) {
    return run(w, keys, null, times).kept();
  }

  /** The whole run with long keys, with its bytes and sizing counts. */
  static Run runLongs(Window w, long[] keys, long[] times) {
    return run(w, keys, null, times);
  }

  /** As above with byte-string keys. */
  static TreeSet<Long> keptBytes(Window w, byte[][] keys, long[] times) {
    return run(w, null, keys, times).kept();
  }

  private static Run run(Window w, long[] longKeys, byte[][] byteKeys, long[] times) {
    final TreeSet<Long> kept = new TreeSet<>();
    long peakBytes = 0;
    try (NativeWindowShards window =
        new NativeWindowShards(
            w.window(), 0, w.generations(), w.fpr(), w.capacity(), 0, w.shards(), w.sized(),
            w.maxCapacity())) {
      for (int s = 0; s < w.shards(); ++s) {
        window.addEmpty(s);
      }
      window.generationBudget(w.generationBudget());
      final int n = times.length;
      final int[] shards = longKeys != null ? window.shardOf(longKeys) : window.shardOf(byteKeys);
      long clock = Long.MIN_VALUE;
      for (int begin = 0; begin < n; begin += BATCH) {
        final int count = Math.min(BATCH, n - begin);
        final long[] clocks = new long[count];
        final int[] batchShards = new int[count];
        final byte[] isNew = new byte[count];
        for (int i = 0; i < count; ++i) {
          clock = Math.max(clock, times[begin + i]);
          clocks[i] = clock;
          batchShards[i] = shards[begin + i];
        }
        if (longKeys != null) {
          final long[] batch = java.util.Arrays.copyOfRange(longKeys, begin, begin + count);
          window.dedup(batch, batchShards, clocks, count, isNew);
        } else {
          int size = 0;
          for (int i = 0; i < count; ++i) {
            size += byteKeys[begin + i].length;
          }
          final byte[] blob = new byte[size];
          final int[] ends = new int[count];
          int end = 0;
          for (int i = 0; i < count; ++i) {
            final byte[] key = byteKeys[begin + i];
            System.arraycopy(key, 0, blob, end, key.length);
            end += key.length;
            ends[i] = end;
          }
          window.dedup(blob, ends, batchShards, clocks, count, isNew);
        }
        window.advanceTo(clock);
        peakBytes = Math.max(peakBytes, window.sizingStats()[0]);
        for (int i = 0; i < count; ++i) {
          if (isNew[i] != 0) {
            kept.add((long) begin + i);
          }
        }
      }
      final long[] stats = window.sizingStats();
      return new Run(kept, peakBytes, stats[1], stats[2]);
    }
  }
}
