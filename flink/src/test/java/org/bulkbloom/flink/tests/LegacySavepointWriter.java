package org.bulkbloom.flink.tests;

import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.TreeSet;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

/**
 * Writes the fixture of {@link LegacyStateTest}: the Records stream at parallelism 2 through
 * {@link Records#dedup()}, stopped with a canonical savepoint once a record past id 6000 is kept,
 * into `DIR/savepoint`, and the ids kept before it into `DIR/kept-before.txt`. The committed
 * fixture (flink/src/test/data/legacy-savepoint) was written by the operator of commit e717201,
 * whose shards kept the configured size; run with that commit's jars to write it again. Argument:
 * DIR.
 */
public final class LegacySavepointWriter {

  private LegacySavepointWriter() {}

  public static void main(String[] args) throws Exception {
    final Path dir = Files.createDirectories(Path.of(args[0]));
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(2);
    Records.dedup()
        .apply(Records.source(env, 5_000).uid("records"))
        .uid("dedup")
        .map(new KeptIds())
        .uid("collect")
        .sinkTo(new DiscardingSink<>());
    final JobClient job = env.executeAsync("legacy savepoint");
    while (KeptIds.LAST_ID.get() < 6_000) {
      Thread.sleep(5);
    }
    final Path savepoints = dir.resolve("savepoints");
    final String written =
        job.stopWithSavepoint(false, savepoints.toUri().toString(), SavepointFormatType.CANONICAL)
            .get();
    Files.move(Path.of(java.net.URI.create(written)), dir.resolve("savepoint"));
    Files.delete(savepoints);
    try (PrintWriter out =
        new PrintWriter(
            Files.newBufferedWriter(dir.resolve("kept-before.txt"), StandardCharsets.UTF_8))) {
      for (long id : new TreeSet<>(KeptIds.KEPT)) {
        out.print(id + "\n");
      }
    }
    System.out.println("savepoint after record " + KeptIds.LAST_ID.get() + " in " + dir);
  }
}
