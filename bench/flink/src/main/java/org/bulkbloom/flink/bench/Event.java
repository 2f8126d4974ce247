package org.bulkbloom.flink.bench;

/** One generated record: the id the job deduplicates on and the event time it carries. */
public final class Event {
  public long id;
  public long timeMs;

  public Event() {}

  public Event(long id, long timeMs) {
    this.id = id;
    this.timeMs = timeMs;
  }
}
