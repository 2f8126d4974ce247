package org.bulkbloom.examples.flink;

import org.apache.flink.connector.datagen.source.GeneratorFunction;

/**
 * {@code records} visits spread evenly over {@code spanMs} of event time. Most are new visits; a
 * tenth re-send a visit from up to 30 hours before (inside the 36-hour window: must be dropped),
 * and a tenth re-send one from 50 to 60 hours before (long forgotten: must pass). Deterministic,
 * so the checker can replay it.
 */
public final class VisitGenerator implements GeneratorFunction<Long, Visit> {
  private static final long HOUR_MS = 3_600_000L;

  private final long records;
  private final long spanMs;
  private final long startMs;

  public VisitGenerator(long records, long spanMs, long startMs) {
    this.records = records;
    this.spanMs = spanMs;
    this.startMs = startMs;
  }

  /** The splitmix64 finalizer: distinct inputs give distinct visit ids. */
  private static long mix64(long z) {
    z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
    return z ^ (z >>> 31);
  }

  public long timeOf(long index) {
    return startMs + (long) ((double) index / records * spanMs);
  }

  /** The record {@code hoursBack} (a hashed amount in [low, high)) before {@code index}, if any. */
  private long earlier(long index, long lowHours, long highHours) {
    long backMs =
        lowHours * HOUR_MS
            + Long.remainderUnsigned(mix64(~index), (highHours - lowHours) * HOUR_MS);
    long target = (long) ((double) (timeOf(index) - backMs - startMs) / spanMs * records);
    return target >= 0 && target < index ? target : -1;
  }

  /** The record whose visit record {@code index} re-sends, or {@code index} for a new visit. */
  public long original(long index) {
    while (true) {
      int kind = (int) Long.remainderUnsigned(mix64(index), 10);
      long source = kind == 0 ? earlier(index, 0, 30) : kind == 1 ? earlier(index, 50, 60) : -1;
      if (source < 0) {
        return index;
      }
      index = source;
    }
  }

  public Visit visit(long index) {
    return new Visit(mix64(original(index) ^ 0x5eed), index, timeOf(index));
  }

  @Override
  public Visit map(Long index) {
    return visit(index);
  }
}
