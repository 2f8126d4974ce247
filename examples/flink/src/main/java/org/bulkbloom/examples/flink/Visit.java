package org.bulkbloom.examples.flink;

/** A page visit as a tracker sends it: clients re-send visits they are unsure were delivered. */
public final class Visit {
  /** The client's id for the visit, the same on every re-send. */
  public long visitId;
  /** The record's position in the generated stream, to check the job's answers afterwards. */
  public long index;
  /** When the record was sent (its event time), in milliseconds. */
  public long timeMs;

  public Visit() {}

  public Visit(long visitId, long index, long timeMs) {
    this.visitId = visitId;
    this.index = index;
    this.timeMs = timeMs;
  }
}
