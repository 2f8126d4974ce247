package org.bulkbloom.flink.tests;

import java.nio.file.Files;
import java.nio.file.Path;
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
  }
}
