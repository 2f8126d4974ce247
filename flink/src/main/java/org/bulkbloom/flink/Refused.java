package org.bulkbloom.flink;

/**
 * A record that {@link BloomDedup} did not decide, on its side output ({@link
 * BloomDedup#refused}): it was neither emitted nor inserted into the window, and it did not move
 * the window's clock. A Flink POJO.
 *
 * @param <T> the type of the deduplicated records
 */
public final class Refused<T> {
  /** Why a record was refused. */
  public enum Reason {
    /**
     * An event-time record without a timestamp (or with Flink's NO_TIMESTAMP, Long.MIN_VALUE),
     * refused under {@link BloomDedup#refuseMissingTimestamps()}; by default it fails the job.
     */
    MISSING_TIME,
    /** Stamped after the wall clock plus {@link BloomDedup#maxFuture}: it would pin the clock. */
    FUTURE,
    /**
     * Stamped more than {@link BloomDedup#lateness} behind the subtask's clock: the window could
     * not promise that a repeat within its length is dropped.
     */
    LATE
  }

  /** The record, unchanged. */
  public T record;

  /** Why it was refused. */
  public Reason reason;

  /** Its timestamp in milliseconds, Long.MIN_VALUE when it had none. */
  public long timestamp;

  /**
   * The limit it crossed, in milliseconds: for FUTURE the latest timestamp accepted then (the wall
   * clock plus maxFuture), for LATE the earliest (the subtask's clock less the lateness), for
   * MISSING_TIME Long.MIN_VALUE.
   */
  public long bound;

  /** For Flink's POJO serializer. */
  public Refused() {}

  public Refused(T record, Reason reason, long timestamp, long bound) {
    this.record = record;
    this.reason = reason;
    this.timestamp = timestamp;
    this.bound = bound;
  }

  @Override
  public String toString() {
    return "Refused{" + reason + ", timestamp " + timestamp + ", bound " + bound + ": " + record
        + "}";
  }
}
