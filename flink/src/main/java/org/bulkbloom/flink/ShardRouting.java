package org.bulkbloom.flink;

import java.io.Serializable;
import java.util.Arrays;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;

/**
 * Which shard of the window a key belongs to (DESIGN §9), and the Flink key that sends the shard
 * to its owner.
 *
 * <p>The operator's max parallelism is the shard count S, so Flink has exactly S key groups, and
 * shard s travels under an integer key chosen so that Flink puts it in key group s. Key groups go
 * to subtasks in contiguous ranges, and a restore at another parallelism hands whole key groups,
 * that is whole shards, to their new owners: no shard is ever cut or rehashed.
 */
final class ShardRouting implements Serializable {
  private static final long serialVersionUID = 1L;

  private final long numBlocks;
  private final boolean full64;
  private final long seed;
  private final int numShards;
  // shardKeys[s]: the integer whose key group is s. keyShards[k]: the shard of key k, or -1.
  private final int[] shardKeys;
  private final int[] keyShards;

  ShardRouting(long numBlocks, boolean full64, long seed, int numShards) {
    this.numBlocks = numBlocks;
    this.full64 = full64;
    this.seed = seed;
    this.numShards = numShards;
    shardKeys = new int[numShards];
    Arrays.fill(shardKeys, -1);
    int found = 0;
    int key = 0;
    for (; found < numShards; ++key) {
      final int group = KeyGroupRangeAssignment.assignToKeyGroup(key, numShards);
      if (shardKeys[group] < 0) {
        shardKeys[group] = key;
        ++found;
      }
    }
    keyShards = new int[key];
    Arrays.fill(keyShards, -1);
    for (int s = 0; s < numShards; ++s) {
      keyShards[shardKeys[s]] = s;
    }
  }

  int numShards() {
    return numShards;
  }

  /** The shard of a key whose 64-bit hash is {@code hash}: DESIGN §9's formula. */
  int shardOfHash(long hash) {
    final long high = (hash >>> 32) * numBlocks;
    final long block;
    if (full64) {
      block = (high + (((hash & 0xFFFFFFFFL) * numBlocks) >>> 32)) >>> 32;
    } else {
      block = high >>> 32;
    }
    return (int) Long.divideUnsigned((block + 1) * numShards - 1, numBlocks);
  }

  int shardOfLong(long key) {
    return shardOfHash(Xxh64.ofLong(key, seed));
  }

  int shardOfBytes(byte[] key) {
    return shardOfHash(Xxh64.ofBytes(key, 0, key.length, seed));
  }

  /** The Flink key of shard {@code shard}. */
  int keyOfShard(int shard) {
    return shardKeys[shard];
  }

  /** The shard whose Flink key is {@code key}. */
  int shardOfKey(int key) {
    return keyShards[key];
  }
}
