package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.java.tuple.Tuple3;

/**
 * Collects the ids of the records that pass it, in this JVM (the MiniCluster's), for tests whose
 * jobs stop with a savepoint and resume: the ids of every run of the test, and the largest.
 */
final class KeptIds implements MapFunction<Tuple3<String, Long, Long>, Long> {
  private static final long serialVersionUID = 1L;
  static final ConcurrentLinkedQueue<Long> KEPT = new ConcurrentLinkedQueue<>();
  static final AtomicLong LAST_ID = new AtomicLong(-1);

  @Override
  public Long map(Tuple3<String, Long, Long> r) {
    KEPT.add(r.f2);
    LAST_ID.accumulateAndGet(r.f2, Math::max);
    return r.f2;
  }

  /**
   * The ids kept since a restore from the savepoint of fixture folder {@code fixture}, with those
   * its run kept before it ({@code kept-before.txt}, as {@link LegacySavepointWriter} writes it);
   * fails when an id was kept twice or the two runs' ids overlap.
   */
  static TreeSet<Long> withKeptBefore(Path fixture) throws IOException {
    final TreeSet<Long> kept = new TreeSet<>(KEPT);
    assertTrue(kept.size() == KEPT.size(), "a record was kept twice after the restore");
    final TreeSet<Long> before = new TreeSet<>();
    for (String line :
        Files.readAllLines(fixture.resolve("kept-before.txt"), StandardCharsets.UTF_8)) {
      before.add(Long.parseLong(line));
    }
    assertTrue(
        !before.isEmpty() && !kept.isEmpty() && before.last() < kept.first(),
        "the savepoint's records and the restored run's overlap");
    kept.addAll(before);
    return kept;
  }
}
