package org.bulkbloom.flink.tests;

import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.TreeSet;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

/**
 * Writes the fixture of {@link LegacyStateTest}: the Records stream at parallelism 2 through
 * {@link Records#dedup()}, stopped with a canonical savepoint once a record past id 6000 is kept,
 * into `DIR/savepoint`, and the ids kept before it into `DIR/kept-before.txt`. The committed
 * fixture (flink/src/test/data/legacy-savepoint) was written by the operator of commit e717201,
 * whose shards kept the configured size; run with that commit's jars to write it again. Arguments:
 * DIR, and optionally a checkpoint interval in milliseconds: then the job checkpoints that often,
 * the records come at 200 a second (a period of the window every 2 s) and the savepoint is taken
 * once a record past id 6050 is kept, so that its open parts hold logs of checkpoints before it. The fixture of {@link
 * ManifestV1Test} (flink/src/test/data/manifest-v1-savepoint) was written so, with 100 ms, by the
 * operator of commit a4daa07 (keyed state, manifest version 1).
 */
public final class LegacySavepointWriter {

  private LegacySavepointWriter() {}

  public static void main(String[] args) throws Exception {
    final Path dir = Files.createDirectories(Path.of(args[0]));
    final boolean checkpointing = args.length > 1;
    final Configuration conf = new Configuration();
    if (checkpointing) {
      conf.set(
          CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(Long.parseLong(args[1])));
    }
    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(2);
    Records.dedup()
        .apply(Records.source(env, checkpointing ? 200 : 5_000).uid("records"))
        .uid("dedup")
        .map(new KeptIds())
        .uid("collect")
        .sinkTo(new DiscardingSink<>());
    final JobClient job = env.executeAsync("legacy savepoint");
    // With checkpoints, a few of them into the window's period that starts at record 6000.
    final long last = checkpointing ? 6_050 : 6_000;
    while (KeptIds.LAST_ID.get() < last) {
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
