package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.TreeSet;
import java.util.function.LongFunction;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.bulkbloom.flink.BloomDedup;
import org.junit.jupiter.api.function.Executable;

/**
 * The tests' input: record i is (key, event time in seconds, id = i), ten records a second in time
 * order. A quarter of the keys repeat every 80 s (within the window), a quarter every 180 s (after
 * it is forgotten), the rest are unique, so the window drops repeats, forgets, and makes false
 * drops.
 */
final class Records {
  static final int COUNT = 20_000;
  static final Duration WINDOW = Duration.ofSeconds(120);
  static final int GENERATIONS = 4;
  static final long CAPACITY = 1_200;
  static final double FPR = 0.05;
  static final int SHARDS = 8;

  private Records() {}

  static Tuple3<String, Long, Long> record(long i) {
    final long j = i / 4;
    final String key =
        i % 4 == 0 ? "r" + (j * 37 % 200) : i % 4 == 1 ? "s" + (j * 13 % 450) : "u" + i;
    return Tuple3.of(key, i / 10, i);
  }

  /** The records as a CSV file for the command line: key,time,id. */
  static void writeCsv(Path path) throws IOException {
    writeCsv(path, i -> record(i).f0);
  }

  /** As above with record i's key {@code key.apply(i)}. */
  static void writeCsv(Path path, LongFunction<String> key) throws IOException {
    try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(path, StandardCharsets.UTF_8))) {
      for (long i = 0; i < COUNT; ++i) {
        final Tuple3<String, Long, Long> r = record(i);
        out.print(key.apply(i) + "," + r.f1 + "," + r.f2 + "\n");
      }
    }
  }

  /** The ids the command line's `dedup --window` keeps, with this class's window options. */
  static TreeSet<Long> cliKept(String cli, Path dir) throws Exception {
    return cliKept(cli, dir, i -> record(i).f0, WINDOW, CAPACITY, FPR);
  }

  /** As above with record i's key {@code key.apply(i)}, another window length, capacity and fpr. */
  static TreeSet<Long> cliKept(
      String cli, Path dir, LongFunction<String> key, Duration window, long capacity, double fpr)
      throws Exception {
    final Path input = dir.resolve("records.csv");
    final Path output = dir.resolve("kept.csv");
    writeCsv(input, key);
    final List<String> command = new ArrayList<>(List.of(
        cli, "dedup", "-f", "csv:1", "--window", window.toSeconds() + "s", "--time-field", "2",
        "--generations", Integer.toString(GENERATIONS), "--capacity", Long.toString(capacity),
        "--fpr", Double.toString(fpr), input.toString(), "-o", output.toString()));
    final Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
    final String log = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (process.waitFor() != 0) {
      fail("the command line failed: " + command + "\n" + log);
    }
    return readKept(output);
  }

  /**
   * The ids the library's window shards keep with this class's window options cut into {@code
   * shards} shards (sized per period or not), fed in stream order (see {@link LibraryReference}).
   */
  static TreeSet<Long> libraryKept(int shards, boolean sized) {
    final byte[][] keys = new byte[COUNT][];
    final long[] times = new long[COUNT];
    for (int i = 0; i < COUNT; ++i) {
      final Tuple3<String, Long, Long> r = record(i);
      keys[i] = r.f0.getBytes(StandardCharsets.UTF_8);
      times[i] = r.f1;
    }
    return LibraryReference.keptBytes(
        new LibraryReference.Window(
            WINDOW.toSeconds(), GENERATIONS, FPR, CAPACITY, 0, shards, sized, 0),
        keys,
        times);
  }

  /** The ids (last field) of the records in a CSV file the command line wrote. */
  static TreeSet<Long> readKept(Path output) throws IOException {
    final TreeSet<Long> kept = new TreeSet<>();
    try (BufferedReader in = Files.newBufferedReader(output, StandardCharsets.UTF_8)) {
      for (String line; (line = in.readLine()) != null; ) {
        kept.add(Long.parseLong(line.substring(line.lastIndexOf(',') + 1)));
      }
    }
    return kept;
  }

  /** The records from one in-order source subtask, with event-time timestamps in milliseconds. */
  static SingleOutputStreamOperator<Tuple3<String, Long, Long>> source(
      StreamExecutionEnvironment env, double recordsPerSecond) {
    return source(env, recordsPerSecond, 100);
  }

  /** As above with record i stamped i * msPerRecord. */
  static SingleOutputStreamOperator<Tuple3<String, Long, Long>> source(
      StreamExecutionEnvironment env, double recordsPerSecond, long msPerRecord) {
    return source(
        env,
        recordsPerSecond > 0
            ? RateLimiterStrategy.perSecond(recordsPerSecond)
            : RateLimiterStrategy.noOp(),
        msPerRecord);
  }

  /** As above, paced by `limiter`. */
  static SingleOutputStreamOperator<Tuple3<String, Long, Long>> source(
      StreamExecutionEnvironment env, RateLimiterStrategy<?> limiter, long msPerRecord) {
    final DataGeneratorSource<Tuple3<String, Long, Long>> generator =
        new DataGeneratorSource<>(
            Records::record, COUNT, limiter, Types.TUPLE(Types.STRING, Types.LONG, Types.LONG));
    return env.fromSource(
            generator,
            WatermarkStrategy.<Tuple3<String, Long, Long>>forMonotonousTimestamps()
                .withTimestampAssigner((r, previous) -> r.f2 * msPerRecord),
            "records")
        .setParallelism(1);
  }

  /** The window the command line runs, on a clock of seconds. */
  static BloomDedup<Tuple3<String, Long, Long>> dedup() {
    return BloomDedup.<Tuple3<String, Long, Long>>byString(r -> r.f0)
        .window(WINDOW)
        .clockUnit(Duration.ofSeconds(1))
        .generations(GENERATIONS)
        .capacity(CAPACITY)
        .fpr(FPR)
        .shards(SHARDS);
  }

  /** As above with the key {@code key}, another window length, capacity and fpr. */
  static BloomDedup<Tuple3<String, Long, Long>> dedup(
      BloomDedup.StringKeySelector<Tuple3<String, Long, Long>> key,
      Duration window,
      long capacity,
      double fpr) {
    return BloomDedup.byString(key)
        .window(window)
        .clockUnit(Duration.ofSeconds(1))
        .generations(GENERATIONS)
        .capacity(capacity)
        .fpr(fpr)
        .shards(SHARDS);
  }

  /**
   * A job's configuration for failures injected between checkpoints: state backend {@code backend}
   * (RocksDB with incremental checkpoints), checkpoints every 50 ms into {@code checkpoints}, and
   * {@code restarts} restarts 10 ms apart.
   */
  static Configuration failoverConfig(String backend, Path checkpoints, int restarts) {
    final Configuration conf = new Configuration();
    conf.set(StateBackendOptions.STATE_BACKEND, backend);
    conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, backend.equals("rocksdb"));
    conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints.toUri().toString());
    conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(50));
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
    conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, restarts);
    conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(10));
    return conf;
  }

  /**
   * System property {@code name}: the tests' arguments (the command-line tool, a scratch folder, a
   * fixture), which ctest passes as -D options (flink/src/test/CMakeLists.txt).
   */
  static String property(String name) {
    final String value = System.getProperty(name);
    assertNotNull(value, "no -D" + name + ": run the test from ctest");
    return value;
  }

  /**
   * A test's random seed: property {@code bulkbloom.test.seed} if set, else a new one; printed, so
   * that a failure can be run again with it.
   */
  static long seed() {
    final String property = System.getProperty("bulkbloom.test.seed");
    final long seed = property != null ? Long.parseLong(property) : new Random().nextLong();
    System.out.println("seed " + seed);
    return seed;
  }

  /** Fails unless {@code call} throws {@code type} with a message that contains {@code text}. */
  static void expect(Class<? extends RuntimeException> type, String text, Executable call) {
    final RuntimeException e =
        assertThrows(type, call, "no " + type.getSimpleName() + " with '" + text + "'");
    assertTrue(
        e.getMessage() != null && e.getMessage().contains(text),
        "expected " + type.getSimpleName() + " with '" + text + "', got " + e);
    System.out.println("rejected: " + e.getMessage());
  }

  /** Fails naming the first ids where the two sets differ. */
  static void checkSame(TreeSet<Long> expected, TreeSet<Long> got, String what) {
    checkSame(expected, got, what, COUNT);
  }

  /** As above for a stream of {@code count} records. */
  static void checkSame(TreeSet<Long> expected, TreeSet<Long> got, String what, long count) {
    final TreeSet<Long> missing = new TreeSet<>(expected);
    missing.removeAll(got);
    final TreeSet<Long> extra = new TreeSet<>(got);
    extra.removeAll(expected);
    assertTrue(
        missing.isEmpty() && extra.isEmpty(),
        what + ": " + got.size() + " records kept, expected " + expected.size() + "; missing ids "
            + first(missing) + ", unexpected ids " + first(extra));
    System.out.println(what + ": the same " + got.size() + " of " + count + " records kept");
  }

  private static String first(TreeSet<Long> ids) {
    return ids.stream().limit(10).toList() + (ids.size() > 10 ? " ..." : "");
  }
}
