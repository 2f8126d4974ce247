package org.bulkbloom.flink;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.SplittableRandom;
import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * The operator routes each record by a Java XXH64 and DESIGN §9's shard formula; the library's
 * own shard_of() must give the same shard for every key, or a record would reach a subtask that
 * does not hold its shard. Checked for long and byte-string keys of every length up to 100, over
 * windows of several sizes and seeds and every useful shard count; full64's block index (only
 * chosen beyond 10^8 blocks) against the formula in exact arithmetic.
 */
public final class RoutingTest {
  @Test
  void routingAgreesWithTheLibrary() {
    final SplittableRandom random = new SplittableRandom(22);
    int windows = 0;
    for (long capacity : new long[] {100, 12_345, 1_000_000}) {
      for (long seed : new long[] {0, 7, -1}) {
        final long fixedBlocks = NativeWindowShards.size(3600, 60, 4, 0.01, capacity, seed, 1, false).numBlocks;
        for (int shards : new int[] {1, 2, 3, 7, (int) Math.min(fixedBlocks, 128), (int) fixedBlocks}) {
         // Fixed-size shards route on the configured layout, sized ones on it rounded up to S.
         for (boolean sized : new boolean[] {false, true}) {
          final NativeWindowShards.Sizing sizing =
              NativeWindowShards.size(3600, 60, 4, 0.01, capacity, seed, shards, sized);
          assertTrue(sizing.blockIndex == 0, "a small window should use high32: " + sizing.description);
          assertTrue(sized ? sizing.numBlocks % shards == 0 && sizing.numBlocks >= fixedBlocks
                      : sizing.numBlocks == fixedBlocks,
              "blocks " + sizing.numBlocks + " for " + shards + " shards, sized " + sized);
          if (shards > sizing.numBlocks) {
            continue;
          }
          final ShardRouting routing = new ShardRouting(sizing.numBlocks, false, seed, shards);
          try (NativeWindowShards window =
              new NativeWindowShards(3600, 60, 4, 0.01, capacity, seed, shards, sized, 0)) {
            final long[] longs = new long[2000];
            for (int i = 0; i < longs.length; ++i) {
              longs[i] = i < 8 ? new long[] {0, 1, -1, Long.MIN_VALUE, Long.MAX_VALUE, 255, 256, 1L << 32}[i]
                               : random.nextLong();
            }
            final int[] expected = window.shardOf(longs);
            for (int i = 0; i < longs.length; ++i) {
              assertTrue(routing.shardOfLong(longs[i]) == expected[i],
                  "long key " + longs[i] + ": Java shard " + routing.shardOfLong(longs[i])
                      + ", library shard " + expected[i] + " of " + shards + " over " + sizing.description);
            }
            final byte[][] keys = new byte[303][];
            for (int i = 0; i < keys.length; ++i) {
              keys[i] = new byte[i % 101];
              for (int j = 0; j < keys[i].length; ++j) {
                keys[i][j] = (byte) random.nextInt(256);
              }
            }
            keys[0] = "u12345".getBytes(StandardCharsets.UTF_8);
            final int[] expectedBytes = window.shardOf(keys);
            for (int i = 0; i < keys.length; ++i) {
              assertTrue(routing.shardOfBytes(keys[i]) == expectedBytes[i],
                  "key " + Arrays.toString(keys[i]) + ": Java shard " + routing.shardOfBytes(keys[i])
                      + ", library shard " + expectedBytes[i]);
            }
          }
          ++windows;
         }
        }
      }
    }
    // full64: floor(h * B / 2^64) as the block, then the shard formula, in exact arithmetic.
    final BigInteger two64 = BigInteger.ONE.shiftLeft(64);
    for (long blocks : new long[] {1, 3, 130_000_001L, 4_294_967_295L}) {
      for (int shards : new int[] {1, 5, 32768}) {
        if (shards > blocks) {
          continue;
        }
        final ShardRouting routing = new ShardRouting(blocks, true, 0, shards);
        for (int i = 0; i < 10_000; ++i) {
          // Half of them the first hash of a random shard's first block and the last hash before
          // it, where the low half of the hash decides the shard.
          final long first = shards == 1 ? 0 : (1 + random.nextLong(shards - 1)) * blocks / shards;
          final BigInteger boundary =
              BigInteger.valueOf(first).multiply(two64)
                  .add(BigInteger.valueOf(blocks - 1)).divide(BigInteger.valueOf(blocks));
          final long h = i < 2 ? -i : i % 2 == 0 ? random.nextLong() : boundary.longValue() - (i % 4 == 1 ? 1 : 0);
          final BigInteger block =
              new BigInteger(Long.toUnsignedString(h)).multiply(BigInteger.valueOf(blocks)).divide(two64);
          final long shard = block.add(BigInteger.ONE).multiply(BigInteger.valueOf(shards))
              .subtract(BigInteger.ONE).divide(BigInteger.valueOf(blocks)).longValueExact();
          assertTrue(routing.shardOfHash(h) == shard,
              "full64 hash " + Long.toUnsignedString(h) + " over " + blocks + " blocks, " + shards
                  + " shards: Java " + routing.shardOfHash(h) + ", exact " + shard);
        }
      }
    }
    System.out.println("routing agrees with the library over " + windows + " windows");
  }
}
