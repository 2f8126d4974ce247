package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.api.java.typeutils.PojoTypeInfo;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.bulkbloom.flink.BloomDedup;
import org.bulkbloom.flink.Refused;
import org.junit.jupiter.api.Test;

/**
 * The event-time clock's guards. Records' input with one record stamped ten years after the wall
 * clock and one a minute late inserted: both go to the side output, counted, and every other
 * decision is that of the library's window shards on the input without them (the clock did not
 * jump, even with the source's watermark ten years ahead). A source without a timestamp assigner
 * fails the job with a message saying how to fix it, or under refuseMissingTimestamps() has every
 * record refused.
 */
public final class ClockGuardTest {
  private static final long FUTURE_AT = 5_000;
  private static final long LATE_AT = 12_000;
  private static final long FUTURE_ID = -1;
  private static final long LATE_ID = -2;

  /**
   * Records' record i at position i, with a record ten years ahead of {@code nowSeconds} before
   * record FUTURE_AT and one 60 s behind record LATE_AT's time before it (times in seconds).
   */
  static GeneratorFunction<Long, Tuple3<String, Long, Long>> guardedInput(long nowSeconds) {
    return position -> {
      if (position == FUTURE_AT) {
        return Tuple3.of("future", nowSeconds + Duration.ofDays(3653).toSeconds(), FUTURE_ID);
      }
      if (position == LATE_AT + 1) {
        return Tuple3.of("late", Records.record(LATE_AT).f1 - 60, LATE_ID);
      }
      return Records.record(position - (position > LATE_AT ? 2 : position > FUTURE_AT ? 1 : 0));
    };
  }

  /**
   * Runs `dedup` over `count` records of `input` and returns the kept ids as "kept ID" and the
   * refused ones as "REASON ID TIMESTAMP BOUND" (passed through the network, serialized).
   */
  static List<String> run(
      String name,
      GeneratorFunction<Long, Tuple3<String, Long, Long>> input,
      long count,
      WatermarkStrategy<Tuple3<String, Long, Long>> watermarks,
      BloomDedup<Tuple3<String, Long, Long>> dedup)
      throws Exception {
    final Configuration conf = new Configuration();
    CountingReporter.enable(conf);
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(2);
    final DataStream<Tuple3<String, Long, Long>> records =
        env.fromSource(
                new DataGeneratorSource<>(
                    input,
                    count,
                    RateLimiterStrategy.noOp(),
                    Types.TUPLE(Types.STRING, Types.LONG, Types.LONG)),
                watermarks,
                name)
            .setParallelism(1);
    final SingleOutputStreamOperator<Tuple3<String, Long, Long>> unique = dedup.apply(records);
    final DataStream<Refused<Tuple3<String, Long, Long>>> refused = BloomDedup.refused(unique);
    assertTrue(
        refused.getType() instanceof PojoTypeInfo,
        "the side output's type is " + refused.getType() + ", not a POJO");
    final DataStream<String> all =
        unique
            .map(r -> "kept " + r.f2)
            .union(
                refused
                    .rebalance()
                    .map(r -> r.reason + " " + r.record.f2 + " " + r.timestamp + " " + r.bound));
    final List<String> out = new ArrayList<>();
    try (CloseableIterator<String> lines = all.executeAndCollect(name)) {
      lines.forEachRemaining(out::add);
    }
    return out;
  }

  private static void checkCounter(String name, long expected) {
    final long got = CountingReporter.sum(name);
    assertTrue(got == expected, "counter " + name + " is " + got + ", expected " + expected);
  }

  /** A record ten years ahead and one a minute late: refused, counted, the rest as the CLI. */
  @Test
  void futureAndLateRecords() throws Exception {
    final TreeSet<Long> expected = Records.libraryKept(Records.SHARDS, true);
    final long startMs = System.currentTimeMillis();
    final long nowSeconds = startMs / 1000;
    final List<String> out =
        run(
            "future and late records",
            guardedInput(nowSeconds),
            Records.COUNT + 2,
            WatermarkStrategy.<Tuple3<String, Long, Long>>forMonotonousTimestamps()
                .withTimestampAssigner((r, previous) -> r.f1 * 1000),
            Records.dedup());
    final TreeSet<Long> kept = new TreeSet<>();
    final List<String> refused = new ArrayList<>();
    for (String line : out) {
      if (line.startsWith("kept ")) {
        kept.add(Long.parseLong(line.substring(5)));
      } else {
        refused.add(line);
      }
    }
    Records.checkSame(expected, kept, "one record 10 years ahead and one late, at parallelism 2");
    refused.sort(null); // FUTURE before LATE, whichever subtask sent it first
    assertTrue(
        refused.size() == 2
            && refused.get(0).startsWith("FUTURE " + FUTURE_ID + " ")
            && refused.get(1).startsWith("LATE " + LATE_ID + " "),
        "the side output holds " + refused + ", expected the future and the late record");
    // FUTURE: its own time, and the wall clock plus a day when it came.
    final String[] future = refused.get(0).split(" ");
    final long futureMs = Long.parseLong(future[2]);
    final long latestAccepted = Long.parseLong(future[3]);
    assertTrue(
        futureMs == guardedInput(nowSeconds).map(FUTURE_AT).f1 * 1000
            && latestAccepted >= startMs + Duration.ofDays(1).toMillis()
            && latestAccepted <= System.currentTimeMillis() + Duration.ofDays(1).toMillis(),
        "the future record's timestamp and bound are wrong: " + refused.get(0));
    // LATE: its own time, and the clock of its subtask (lateness 0), which has seen records of
    // the last ten seconds before it.
    final String[] late = refused.get(1).split(" ");
    final long lateMs = Long.parseLong(late[2]);
    final long earliestAccepted = Long.parseLong(late[3]);
    final long lastTimeMs = Records.record(LATE_AT).f1 * 1000;
    assertTrue(
        lateMs == lastTimeMs - 60_000
            && earliestAccepted > lastTimeMs - 10_000
            && earliestAccepted <= lastTimeMs,
        "the late record's timestamp and bound are wrong: " + refused.get(1));
    checkCounter("kept", expected.size());
    checkCounter("dropped", Records.COUNT - expected.size());
    checkCounter("future", 1);
    checkCounter("late", 1);
    checkCounter("missingTime", 0);
    checkCounter("refused", 2);
    System.out.println("future and late records: refused " + refused + ", counted");
  }

  /** Without a timestamp assigner, the source stamps Long.MIN_VALUE: the job fails, saying so. */
  @Test
  void missingTimestampsFail() throws Exception {
    try {
      final List<String> out =
          run(
              "no timestamps",
              Records::record,
              Records.COUNT,
              WatermarkStrategy.noWatermarks(),
              Records.dedup());
      fail(
          "a source without timestamps did not fail the job: " + out.size() + " of "
              + Records.COUNT + " records came out");
    } catch (Exception e) {
      for (Throwable cause = e; cause != null; cause = cause.getCause()) {
        final String message = String.valueOf(cause.getMessage());
        if (message.startsWith("bulkbloom: a record has no timestamp")) {
          assertTrue(
              message.contains("WatermarkStrategy") && message.contains("processingTime()"),
              "the message does not say how to fix it: " + message);
          System.out.println("no timestamps: the job failed with: " + message);
          return;
        }
      }
      fail("the job failed, but not for its missing timestamps", e);
    }
  }

  /** Under refuseMissingTimestamps() every record without a time is refused and counted. */
  @Test
  void missingTimestampsRefused() throws Exception {
    final List<String> out =
        run(
            "no timestamps, refused",
            Records::record,
            Records.COUNT,
            WatermarkStrategy.noWatermarks(),
            Records.dedup().refuseMissingTimestamps());
    final long missing = out.stream().filter(line -> line.startsWith("MISSING_TIME ")).count();
    assertTrue(
        missing == Records.COUNT && out.size() == Records.COUNT,
        "of " + Records.COUNT + " records without timestamps " + missing + " were refused and "
            + (out.size() - missing) + " decided");
    checkCounter("missingTime", Records.COUNT);
    checkCounter("refused", Records.COUNT);
    checkCounter("kept", 0);
    checkCounter("dropped", 0);
    System.out.println("no timestamps, refused: all " + missing + " records on the side output");
  }
}
