package org.bulkbloom.flink.bench;

import org.apache.flink.connector.datagen.source.GeneratorFunction;

/**
 * A deterministic stream of {@code records} events of which about {@code repeatFraction} repeat an
 * earlier id: record i is a repeat when a hash of i says so, and then copies record i - d for a
 * hashed distance d of at most {@code maxDistance}; otherwise (and always for the first and the last
 * record) it carries the fresh id mix64(i ^ seed). mix64 is a bijection, so fresh ids never
 * collide and the exact dedup keeps exactly the fresh records. Event times rise evenly over
 * {@code spanMs} so that no id falls out of a longer window during the run.
 */
public final class EventGenerator implements GeneratorFunction<Long, Event> {
  private static final long REPEAT_SALT = 0x6a09e667f3bcc909L;
  private static final long DISTANCE_SALT = 0xbb67ae8584caa73bL;

  private final long records;
  private final double repeatFraction;
  private final long maxDistance;
  private final long seed;
  private final long startMs;
  private final long spanMs;

  public EventGenerator(
      long records, double repeatFraction, long maxDistance, long seed, long startMs, long spanMs) {
    this.records = records;
    this.repeatFraction = repeatFraction;
    this.maxDistance = maxDistance;
    this.seed = seed;
    this.startMs = startMs;
    this.spanMs = spanMs;
  }

  /** The splitmix64 finalizer: a bijection on 64-bit values. */
  public static long mix64(long z) {
    z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
    return z ^ (z >>> 31);
  }

  public boolean isRepeat(long index) {
    if (index == 0 || index == records - 1) {
      return false;
    }
    return (mix64(index ^ REPEAT_SALT) >>> 11) * 0x1.0p-53 < repeatFraction;
  }

  /** The id of record {@code index}: the fresh id of the record it (transitively) repeats. */
  public long idOf(long index) {
    while (isRepeat(index)) {
      long reach = Math.min(index, maxDistance);
      index -= 1 + Long.remainderUnsigned(mix64(index ^ DISTANCE_SALT), reach);
    }
    return freshId(index);
  }

  /** The id a fresh record at {@code index} carries; indexes past the stream give unseen ids. */
  public long freshId(long index) {
    return mix64(index ^ seed);
  }

  public long timeOf(long index) {
    return startMs + (long) ((double) index / records * spanMs);
  }

  /** The id of the last record: always fresh, so a sink seeing it knows every record went by. */
  public long lastId() {
    return freshId(records - 1);
  }

  /** How many records an exact dedup keeps: the fresh ones. */
  public long freshCount() {
    long fresh = 0;
    for (long i = 0; i < records; ++i) {
      if (!isRepeat(i)) {
        ++fresh;
      }
    }
    return fresh;
  }

  @Override
  public Event map(Long index) {
    if (index == 0) {
      RunClock.markSourceStart();
    }
    return new Event(idOf(index), timeOf(index));
  }
}
