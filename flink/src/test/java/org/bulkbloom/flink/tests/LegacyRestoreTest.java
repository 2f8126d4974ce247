package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.junit.jupiter.api.Test;

/**
 * A savepoint that an earlier bulkbloom wrote (each shard's whole window file as raw keyed state,
 * before the operator kept its state in keyed state) still restores: resumed at parallelism 2 on
 * the RocksDB backend, the run and the one that took the savepoint together keep exactly the
 * records the command line keeps. Properties: bulkbloom.test.cli, the bulkbloom executable;
 * bulkbloom.test.scratch, a scratch folder; bulkbloom.test.fixture, the fixture folder
 * (flink/src/test/legacy-savepoint: the savepoint and the ids its run kept).
 *
 * <p>{@link #main} with the arguments {@code write FOLDER} runs the records at parallelism 1 up to
 * id 6000 and stops with a savepoint into FOLDER, writing the ids kept to FOLDER/kept.txt: how the
 * fixture was made (see its README).
 */
public final class LegacyRestoreTest {
  private static final ConcurrentLinkedQueue<Long> KEPT = KeptIds.KEPT;
  private static final AtomicLong LAST_ID = KeptIds.LAST_ID;

  private static JobClient start(Configuration conf, int parallelism) throws Exception {
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(parallelism);
    // The savepoint's shards are fixed-size, as every operator before sizing per period made them.
    Records.dedup()
        .fixedSizeShards()
        .apply(Records.source(env, 5_000).uid("records"))
        .uid("dedup")
        .map(new KeptIds())
        .uid("collect")
        .sinkTo(new DiscardingSink<>());
    return env.executeAsync("legacy savepoint at " + parallelism);
  }

  private static void write(Path folder) throws Exception {
    final JobClient job = start(new Configuration(), 1);
    while (LAST_ID.get() < 6_000) {
      Thread.sleep(5);
    }
    final String savepoint =
        job.stopWithSavepoint(false, folder.toUri().toString(), SavepointFormatType.CANONICAL)
            .get();
    final StringBuilder ids = new StringBuilder();
    for (long id : new TreeSet<>(KEPT)) {
      ids.append(id).append('\n');
    }
    Files.writeString(folder.resolve("kept.txt"), ids, StandardCharsets.UTF_8);
    System.out.println("savepoint " + savepoint + ", " + KEPT.size() + " ids kept");
  }

  /** Writes the fixture: arguments {@code write FOLDER}. */
  public static void main(String[] args) throws Exception {
    if (args.length != 2 || !args[0].equals("write")) {
      throw new IllegalArgumentException("usage: LegacyRestoreTest write FOLDER");
    }
    write(Path.of(args[1]));
  }

  @Test
  void oldRawStateSavepointResumes() throws Exception {
    final Path dir = Files.createDirectories(Path.of(Records.property("bulkbloom.test.scratch")));
    final Path fixture = Path.of(Records.property("bulkbloom.test.fixture"));
    final TreeSet<Long> expected = Records.cliKept(Records.property("bulkbloom.test.cli"), dir);
    final List<String> before = Files.readAllLines(fixture.resolve("kept.txt"));
    final String savepoint;
    try (var entries = Files.list(fixture)) {
      savepoint =
          entries
              .filter(p -> p.getFileName().toString().startsWith("savepoint-"))
              .findFirst()
              .orElseGet(() -> fail("no savepoint-* folder in " + fixture))
              .toUri()
              .toString();
    }
    final Configuration conf = new Configuration();
    conf.set(StateRecoveryOptions.SAVEPOINT_PATH, savepoint);
    conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
    start(conf, 2).getJobExecutionResult().get();
    final TreeSet<Long> kept = new TreeSet<>(KEPT);
    assertTrue(kept.size() == KEPT.size(), "a record was kept twice after the restore");
    assertTrue(!kept.isEmpty() && kept.first() > 6_000, "the restore started at " + kept.first()
        + ": the savepoint's source position was lost");
    for (String id : before) {
      assertTrue(kept.add(Long.parseLong(id)), "record " + id + " was kept again after the restore");
    }
    Records.checkSame(expected, kept, "an old raw-state savepoint resumed, against the command line");
  }
}
