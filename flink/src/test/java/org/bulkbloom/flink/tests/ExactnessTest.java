package org.bulkbloom.flink.tests;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.TreeSet;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;

/**
 * The operator at parallelism 3 keeps exactly the records the command line's `dedup --window`
 * keeps, false drops included. Arguments: the bulkbloom executable, a scratch folder.
 */
public final class ExactnessTest {
  private ExactnessTest() {}

  public static void main(String[] args) throws Exception {
    final Path dir = Files.createDirectories(Path.of(args[1]));
    final TreeSet<Long> expected = Records.cliKept(args[0], dir);
    Records.check(
        expected.size() < Records.COUNT * 9 / 10 && expected.size() > Records.COUNT / 2,
        "the command line kept " + expected.size() + " records: the input should make it drop");

    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(3);
    final TreeSet<Long> kept = new TreeSet<>();
    try (CloseableIterator<Long> ids =
        Records.dedup().apply(Records.source(env, 0)).map(r -> r.f2).executeAndCollect("exact")) {
      ids.forEachRemaining(kept::add);
    }
    Records.checkSame(expected, kept, "parallelism 3 against the command line");

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
        Records.check(
            firstOfKey.get(Records.record(id).f0) == id,
            "processing time: record " + id + " passed, but its key came before");
        ++keptNow;
      }
    }
    Records.check(
        keptNow > firstOfKey.size() * 95L / 100,
        "processing time: " + keptNow + " of " + firstOfKey.size() + " distinct keys passed");
    System.out.println(
        "processing time: " + keptNow + " of " + firstOfKey.size() + " first copies passed");
  }
}
