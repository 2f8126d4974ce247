package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.TreeSet;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.bulkbloom.flink.BloomDedup;
import org.junit.jupiter.api.Test;

/**
 * The operator keeps exactly the records the library keeps with the same sizing, false drops
 * included: at parallelism 3 its 8 shards sized per period those of the library's 8 window shards
 * fed the stream in order; with one shard, and with fixed-size shards, those of the command line's
 * `dedup --window` (a single window sizes per period as one shard does; fixed-size shards have the
 * command line's layout). Properties: bulkbloom.test.cli, the bulkbloom executable;
 * bulkbloom.test.scratch, a scratch folder.
 */
public final class ExactnessTest {
  private static TreeSet<Long> run(
      BloomDedup<Tuple3<String, Long, Long>> dedup, int parallelism) throws Exception {
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(parallelism);
    final TreeSet<Long> kept = new TreeSet<>();
    try (CloseableIterator<Long> ids =
        dedup.apply(Records.source(env, 0)).map(r -> r.f2).executeAndCollect("exact")) {
      ids.forEachRemaining(kept::add);
    }
    return kept;
  }

  @Test
  void sameAsTheLibraryAndTheCommandLine() throws Exception {
    final Path dir = Files.createDirectories(Path.of(Records.property("bulkbloom.test.scratch")));
    final TreeSet<Long> expected = Records.cliKept(Records.property("bulkbloom.test.cli"), dir);
    assertTrue(
        expected.size() < Records.COUNT * 9 / 10 && expected.size() > Records.COUNT / 2,
        "the command line kept " + expected.size() + " records: the input should make it drop");

    Records.checkSame(
        Records.libraryKept(Records.SHARDS, true),
        run(Records.dedup(), 3),
        "parallelism 3, 8 shards sized per period, against the library's shards");
    Records.checkSame(
        expected,
        run(Records.dedup().shards(1), 1),
        "one shard sized per period against the command line");
    Records.checkSame(
        expected,
        run(Records.dedup().fixedSizeShards(), 3),
        "parallelism 3, 8 fixed-size shards, against the command line");
  }

  @Test
  void processingTime() throws Exception {
    // Processing time: the run takes far less than a day, so each key's first copy may pass and
    // every later one must be dropped (at most the false drops of a window sized for the run). On
    // event time, with the records stamped an hour apart here, repeats would pass again.
    final StreamExecutionEnvironment envNow = StreamExecutionEnvironment.getExecutionEnvironment();
    envNow.setParallelism(2);
    final java.util.Map<String, Long> firstOfKey = new java.util.HashMap<>();
    for (long i = 0; i < Records.COUNT; ++i) {
      firstOfKey.putIfAbsent(Records.record(i).f0, i);
    }
    long keptNow = 0;
    try (CloseableIterator<Long> ids =
        Records.dedup()
            .window(Duration.ofDays(1))
            .capacity(Records.COUNT)
            .processingTime()
            .apply(Records.source(envNow, 0, 3_600_000))
            .map(r -> r.f2)
            .executeAndCollect("processing time")) {
      while (ids.hasNext()) {
        final long id = ids.next();
        assertTrue(
            firstOfKey.get(Records.record(id).f0) == id,
            "processing time: record " + id + " passed, but its key came before");
        ++keptNow;
      }
    }
    assertTrue(
        keptNow > firstOfKey.size() * 95L / 100,
        "processing time: " + keptNow + " of " + firstOfKey.size() + " distinct keys passed");
    System.out.println(
        "processing time: " + keptNow + " of " + firstOfKey.size() + " first copies passed");
  }
}
