package org.bulkbloom.examples.flink;

import java.time.Duration;
import java.util.BitSet;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.bulkbloom.flink.BloomDedup;

/**
 * Deduplicates a generated stream of page visits with a 36-hour event-time window: a visit re-sent
 * within 36 hours of its last arrival is dropped, one re-sent after the window has forgotten it
 * passes again. The job's output comes back to this program, which replays the stream exactly and
 * reports what was dropped; it exits with 1 if any repeat within the window got through.
 *
 * <pre>
 * DedupExample [RECORDS]   (default 1000000, spread over 96 hours of event time)
 * </pre>
 */
public final class DedupExample {
  static final Duration WINDOW = Duration.ofHours(36);
  static final int GENERATIONS = 4;
  static final double FPR = 0.001;
  static final Duration SPAN = Duration.ofHours(96);
  static final long START_MS = 1_767_225_600_000L; // 2026-01-01T00:00Z

  public static void main(String[] args) throws Exception {
    if (args.length > 1) {
      System.err.println("usage: DedupExample [RECORDS]");
      System.exit(2);
    }
    long records = args.length == 1 ? Long.parseLong(args[0]) : 1_000_000;
    if (records < 1 || records > Integer.MAX_VALUE) {
      System.err.println("DedupExample: RECORDS must lie in [1, 2^31 - 1], got " + records);
      System.exit(2);
    }
    VisitGenerator generator = new VisitGenerator(records, SPAN.toMillis(), START_MS);

    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    // One source subtask emits the visits in time order, so every dedup subtask sees its clock
    // rise (records later than the lateness may be forgotten early).
    DataStream<Visit> visits =
        env.fromSource(
                new DataGeneratorSource<>(generator, records, TypeInformation.of(Visit.class)),
                WatermarkStrategy.<Visit>forMonotonousTimestamps()
                    .withTimestampAssigner((visit, previous) -> visit.timeMs),
                "visits")
            .setParallelism(1);
    // The window's capacity is the most records one window length can hold.
    long perWindow = records * WINDOW.toMillis() / SPAN.toMillis() + 1;
    DataStream<Visit> unique =
        BloomDedup.<Visit>byLong(visit -> visit.visitId)
            .window(WINDOW)
            .generations(GENERATIONS)
            .capacity(perWindow)
            .fpr(FPR)
            .apply(visits);

    BitSet kept = new BitSet();
    CloseableIterator<Visit> out = unique.executeAndCollect("bulkbloom dedup example");
    try {
      while (out.hasNext()) {
        kept.set((int) out.next().index);
      }
    } finally {
      out.close();
    }
    System.exit(check(generator, records, kept) ? 0 : 1);
  }

  /** Replays the stream and compares each record's fate with the window's rules. */
  private static boolean check(VisitGenerator generator, long records, BitSet kept) {
    long windowMs = WINDOW.toMillis();
    long forgottenMs = windowMs * GENERATIONS / (GENERATIONS - 1);
    Map<Long, Long> lastArrivalMs = new HashMap<>();
    long repeats = 0;
    long leaked = 0;
    long owed = 0;
    long falseDrops = 0;
    long between = 0;
    for (long index = 0; index < records; ++index) {
      Visit visit = generator.visit(index);
      Long last = lastArrivalMs.put(visit.visitId, visit.timeMs);
      boolean passed = kept.get((int) index);
      if (last != null && visit.timeMs - last <= windowMs) {
        ++repeats;
        leaked += passed ? 1 : 0;
      } else if (last == null || visit.timeMs - last > forgottenMs) {
        ++owed;
        falseDrops += passed ? 0 : 1;
      } else {
        ++between;
      }
    }
    System.out.printf(
        "%d visits over %d h of event time, window %d h (%d generations, FPR %.3g when full)%n"
            + "kept %d%n"
            + "repeats within the window: %d, got through: %d%n"
            + "new or forgotten visits: %d, dropped as false positives: %d (%.2g)%n"
            + "repeats between %d h and %d h (either answer is right): %d%n",
        records, SPAN.toHours(), WINDOW.toHours(), GENERATIONS, FPR, kept.cardinality(), repeats,
        leaked, owed, falseDrops, (double) falseDrops / Math.max(1, owed), WINDOW.toHours(),
        forgottenMs / 3_600_000, between);
    if (leaked > 0) {
      System.out.println("FAILED: a repeat within the window got through");
    }
    return leaked == 0;
  }
}
