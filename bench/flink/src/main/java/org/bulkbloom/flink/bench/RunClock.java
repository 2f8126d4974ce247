package org.bulkbloom.flink.bench;

import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What the job's tasks report to the harness. The MiniCluster runs them in the harness's JVM and
 * class loader, so plain statics reach it; each job resets them before it is submitted.
 */
public final class RunClock {
  private static final AtomicLong sourceStartNanos = new AtomicLong();
  private static final AtomicLong firstOutputNanos = new AtomicLong();
  private static final AtomicLong lastIdNanos = new AtomicLong();
  private static final AtomicLong lastOutputNanos = new AtomicLong();
  private static final AtomicLong longestGapNanos = new AtomicLong();
  private static final AtomicLong kept = new AtomicLong();
  private static final AtomicLong oldKept = new AtomicLong();
  private static volatile long lastId;
  private static volatile Set<Long> oldIds = Set.of();

  private RunClock() {}

  /**
   * Forgets the last job's figures; the sink will time {@code expectedLastId} and count the kept
   * records whose ids lie in {@code alreadySeen}.
   */
  public static void reset(long expectedLastId, Set<Long> alreadySeen) {
    sourceStartNanos.set(0);
    firstOutputNanos.set(0);
    lastIdNanos.set(0);
    lastOutputNanos.set(0);
    longestGapNanos.set(0);
    kept.set(0);
    oldKept.set(0);
    lastId = expectedLastId;
    oldIds = alreadySeen;
  }

  static void markSourceStart() {
    sourceStartNanos.compareAndSet(0, System.nanoTime());
  }

  static void markOutput(long id) {
    long now = System.nanoTime();
    if (kept.getAndIncrement() == 0) {
      firstOutputNanos.compareAndSet(0, now);
    }
    long previous = lastOutputNanos.getAndSet(now);
    if (previous != 0 && lastIdNanos.get() == 0) {
      longestGapNanos.accumulateAndGet(now - previous, Math::max);
    }
    if (id == lastId) {
      lastIdNanos.set(now);
    }
    if (!oldIds.isEmpty() && oldIds.contains(id)) {
      oldKept.incrementAndGet();
    }
  }

  public static long sourceStartNanos() {
    return sourceStartNanos.get();
  }

  public static long firstOutputNanos() {
    return firstOutputNanos.get();
  }

  public static long lastIdNanos() {
    return lastIdNanos.get();
  }

  /** The longest time between two records reaching the sink, up to the stream's last record. */
  public static long longestGapNanos() {
    return longestGapNanos.get();
  }

  public static long oldKept() {
    return oldKept.get();
  }

  public static long kept() {
    return kept.get();
  }
}
