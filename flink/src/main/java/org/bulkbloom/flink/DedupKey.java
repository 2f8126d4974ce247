package org.bulkbloom.flink;

import java.io.Serializable;

/** How a record's dedup key is taken: a {@code long}, or a byte string. */
abstract class DedupKey<T> implements Serializable {
  private static final long serialVersionUID = 1L;

  /** True for {@code long} keys, false for byte strings. */
  abstract boolean isLong();

  long longKey(T record) throws Exception {
    throw new UnsupportedOperationException();
  }

  byte[] bytesKey(T record) throws Exception {
    throw new UnsupportedOperationException();
  }

  static final class OfLong<T> extends DedupKey<T> {
    private static final long serialVersionUID = 1L;
    private final BloomDedup.LongKeySelector<T> selector;

    OfLong(BloomDedup.LongKeySelector<T> selector) {
      this.selector = selector;
    }

    @Override
    boolean isLong() {
      return true;
    }

    @Override
    long longKey(T record) throws Exception {
      return selector.key(record);
    }
  }

  static final class OfBytes<T> extends DedupKey<T> {
    private static final long serialVersionUID = 1L;
    private final BloomDedup.BytesKeySelector<T> selector;

    OfBytes(BloomDedup.BytesKeySelector<T> selector) {
      this.selector = selector;
    }

    @Override
    boolean isLong() {
      return false;
    }

    @Override
    byte[] bytesKey(T record) throws Exception {
      return selector.key(record);
    }
  }
}
