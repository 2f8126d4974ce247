package org.bulkbloom.flink.tests;

import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.java.tuple.Tuple3;

/**
 * Collects the ids of the records that pass it, in this JVM (the MiniCluster's), for tests whose
 * jobs stop with a savepoint and resume: the ids of every run of the test, and the largest.
 */
final class KeptIds implements MapFunction<Tuple3<String, Long, Long>, Long> {
  private static final long serialVersionUID = 1L;
  static final ConcurrentLinkedQueue<Long> KEPT = new ConcurrentLinkedQueue<>();
  static final AtomicLong LAST_ID = new AtomicLong(-1);

  @Override
  public Long map(Tuple3<String, Long, Long> r) {
    KEPT.add(r.f2);
    LAST_ID.accumulateAndGet(r.f2, Math::max);
    return r.f2;
  }
}
