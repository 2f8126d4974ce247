package org.bulkbloom.flink;

/**
 * XXH64 as bulkbloom hashes keys (src/key_hash.*, include/bulkbloom/detail/block_math.hpp): a
 * {@code long} key is hashed as its 8 little-endian bytes, a byte-string key as its bytes, both
 * with the layout's seed. Used to route each record to the subtask that owns its shard; the
 * native library hashes the keys again for the filter itself, and the tests check that both agree.
 */
final class Xxh64 {
  private static final long P1 = 0x9E3779B185EBCA87L;
  private static final long P2 = 0xC2B2AE3D27D4EB4FL;
  private static final long P3 = 0x165667B19E3779F9L;
  private static final long P4 = 0x85EBCA77C2B2AE63L;
  private static final long P5 = 0x27D4EB2F165667C5L;

  private Xxh64() {}

  /** XXH64 of the 8 little-endian bytes of {@code key}. */
  static long ofLong(long key, long seed) {
    long h = seed + P5 + 8;
    h ^= round(0, key);
    h = Long.rotateLeft(h, 27) * P1 + P4;
    return avalanche(h);
  }

  /** XXH64 of {@code bytes[offset .. offset + length)}. */
  static long ofBytes(byte[] bytes, int offset, int length, long seed) {
    final int end = offset + length;
    int p = offset;
    long h;
    if (length >= 32) {
      long v1 = seed + P1 + P2;
      long v2 = seed + P2;
      long v3 = seed;
      long v4 = seed - P1;
      for (; p + 32 <= end; p += 32) {
        v1 = round(v1, longAt(bytes, p));
        v2 = round(v2, longAt(bytes, p + 8));
        v3 = round(v3, longAt(bytes, p + 16));
        v4 = round(v4, longAt(bytes, p + 24));
      }
      h =
          Long.rotateLeft(v1, 1)
              + Long.rotateLeft(v2, 7)
              + Long.rotateLeft(v3, 12)
              + Long.rotateLeft(v4, 18);
      h = mergeRound(h, v1);
      h = mergeRound(h, v2);
      h = mergeRound(h, v3);
      h = mergeRound(h, v4);
    } else {
      h = seed + P5;
    }
    h += length;
    for (; p + 8 <= end; p += 8) {
      h ^= round(0, longAt(bytes, p));
      h = Long.rotateLeft(h, 27) * P1 + P4;
    }
    if (p + 4 <= end) {
      h ^= (intAt(bytes, p) & 0xFFFFFFFFL) * P1;
      h = Long.rotateLeft(h, 23) * P2 + P3;
      p += 4;
    }
    for (; p < end; ++p) {
      h ^= (bytes[p] & 0xFFL) * P5;
      h = Long.rotateLeft(h, 11) * P1;
    }
    return avalanche(h);
  }

  private static long round(long acc, long lane) {
    acc += lane * P2;
    acc = Long.rotateLeft(acc, 31);
    return acc * P1;
  }

  private static long mergeRound(long acc, long v) {
    acc ^= round(0, v);
    return acc * P1 + P4;
  }

  private static long avalanche(long h) {
    h ^= h >>> 33;
    h *= P2;
    h ^= h >>> 29;
    h *= P3;
    h ^= h >>> 32;
    return h;
  }

  private static long longAt(byte[] b, int p) {
    return (b[p] & 0xFFL)
        | (b[p + 1] & 0xFFL) << 8
        | (b[p + 2] & 0xFFL) << 16
        | (b[p + 3] & 0xFFL) << 24
        | (b[p + 4] & 0xFFL) << 32
        | (b[p + 5] & 0xFFL) << 40
        | (b[p + 6] & 0xFFL) << 48
        | (b[p + 7] & 0xFFL) << 56;
  }

  private static int intAt(byte[] b, int p) {
    return (b[p] & 0xFF) | (b[p + 1] & 0xFF) << 8 | (b[p + 2] & 0xFF) << 16 | (b[p + 3] & 0xFF) << 24;
  }
}
