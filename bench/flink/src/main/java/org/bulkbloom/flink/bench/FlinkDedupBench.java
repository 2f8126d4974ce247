package org.bulkbloom.flink.bench;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.configuration.WebOptions;
import org.apache.flink.core.execution.RecoveryClaimMode;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.runtime.checkpoint.AbstractCheckpointStats;
import org.apache.flink.runtime.checkpoint.CheckpointStatsSnapshot;
import org.apache.flink.runtime.execution.ExecutionState;
import org.apache.flink.runtime.executiongraph.AccessExecutionVertex;
import org.apache.flink.runtime.jobgraph.SavepointRestoreSettings;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.state.rocksdb.RocksDBOptions;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.graph.StreamGraph;

/**
 * One measurement of one dedup on Flink's MiniCluster, in this JVM, printed as one line of
 * {@code key=value} pairs:
 *
 * <ol>
 *   <li>the main job dedups {@code --records} generated events (parallelism 1); records/s runs from
 *       the source's first record to the sink's receipt of the stream's last record, which is
 *       always fresh. A second source that emits nothing keeps the job running once the events
 *       are out, so that the state is still there for the checkpoint;
 *   <li>the live state's size (heap growth after a full GC for the hashmap backend, the RocksDB
 *       folder after the checkpoint, or what the dedup itself reports);
 *   <li>one checkpoint, triggered then, timed to completion; its size is what it wrote to disk;
 *   <li>with {@code --checkpoint-interval-ms I}, the main job also checkpoints every I ms
 *       (exactly-once) while the events run: the line adds how many completed, the bytes each
 *       wrote (Flink's checkpointed size: what an incremental checkpoint uploaded) on average and
 *       at most, and the longest time between two records reaching the sink;
 *   <li>the job is cancelled (the checkpoint is retained) and a probe job of {@value #PROBES}
 *       events — half of them ids of the stream, half new — runs twice: without state (the cost of
 *       starting a job) and restored from the checkpoint. The restored run must drop every old id.
 * </ol>
 *
 * <p>With {@code --restore-from CHECKPOINT} (a checkpoint an earlier run of the same mode, records,
 * seed and capacity retained under its work dir) only the restored probe runs: a restore timed
 * alone, so that the page cache can be dropped before it, or a local read of the same bytes timed
 * beside it.
 */
public final class FlinkDedupBench {
  static final int PROBES = 10_000;
  static final Duration WINDOW = Duration.ofHours(36);
  static final long SPAN_MS = Duration.ofHours(24).toMillis();
  static final long START_MS = 1_700_000_000_000L;
  static final long MAX_REPEAT_DISTANCE = 1_000_000;
  static final String DEDUP_UID = "dedup";

  private final Dedup dedup;
  private final long records;
  private final EventGenerator generator;
  private final Path workDir;
  private final long capacity;
  private final long checkpointIntervalMs;
  // Flink options given on the command line, over the benchmark's own.
  private final Map<String, String> flinkConf;
  // The events' source's rate limit (0: none).
  private final long recordsPerSecond;
  private final String restoreFrom;
  // How the probes restore: NO_CLAIM unless told (the changelog backend refuses it).
  private final RecoveryClaimMode claimMode;

  private FlinkDedupBench(
      Dedup dedup, long records, double repeatFraction, long seed, Path workDir, long capacity,
      long checkpointIntervalMs, Map<String, String> flinkConf, long recordsPerSecond,
      String restoreFrom, RecoveryClaimMode claimMode) {
    this.dedup = dedup;
    this.restoreFrom = restoreFrom;
    this.claimMode = claimMode;
    this.records = records;
    // The records one window length holds at the stream's rate (it spans less than T), unless
    // given: a larger capacity measures a large window that the run fills only in part.
    this.capacity =
        capacity > 0 ? capacity : (long) Math.ceil((double) records * WINDOW.toMillis() / SPAN_MS);
    this.checkpointIntervalMs = checkpointIntervalMs;
    this.flinkConf = flinkConf;
    this.recordsPerSecond = recordsPerSecond;
    this.generator =
        new EventGenerator(records, repeatFraction, MAX_REPEAT_DISTANCE, seed, START_MS, SPAN_MS);
    this.workDir = workDir;
  }

  public static void main(String[] args) throws Exception {
    String mode = null;
    long records = 1_000_000;
    double repeatFraction = 0.1;
    long seed = 42;
    Path workDir = null;
    int shards = 0;
    long capacity = 0;
    long checkpointIntervalMs = 0;
    Map<String, String> flinkConf = new HashMap<>();
    long recordsPerSecond = 0;
    String restoreFrom = null;
    RecoveryClaimMode claimMode = RecoveryClaimMode.NO_CLAIM;
    for (int i = 0; i < args.length; i += 2) {
      if (i + 1 >= args.length) {
        usage("missing value after " + args[i]);
      }
      String value = args[i + 1];
      switch (args[i]) {
        case "--mode" -> mode = value;
        case "--records" -> records = parsePositive(args[i], value);
        case "--repeat-fraction" -> repeatFraction = Double.parseDouble(value);
        case "--seed" -> seed = Long.parseLong(value);
        case "--work-dir" -> workDir = Paths.get(value);
        case "--shards" -> shards = Integer.parseInt(value);
        case "--capacity" -> capacity = parsePositive(args[i], value);
        case "--checkpoint-interval-ms" -> checkpointIntervalMs = parsePositive(args[i], value);
        case "--records-per-s" -> recordsPerSecond = parsePositive(args[i], value);
        case "--flink-conf" -> {
          int eq = value.indexOf('=');
          if (eq <= 0) {
            usage("--flink-conf takes KEY=VALUE, got " + value);
          }
          flinkConf.put(value.substring(0, eq), value.substring(eq + 1));
        }
        case "--restore-from" -> restoreFrom = value;
        case "--restore-mode" -> {
          if (!value.equals("claim") && !value.equals("no_claim")) {
            usage("--restore-mode takes claim or no_claim, got " + value);
          }
          claimMode = RecoveryClaimMode.valueOf(value.toUpperCase(Locale.ROOT));
        }
        default -> usage("unknown option " + args[i]);
      }
    }
    if (mode == null || workDir == null) {
      usage("--mode and --work-dir are required");
    }
    if (!(repeatFraction >= 0 && repeatFraction < 1)) {
      usage("--repeat-fraction must lie in [0, 1), got " + repeatFraction);
    }
    if (Files.exists(workDir)) {
      usage(workDir + " exists; give a fresh --work-dir");
    }
    Dedup dedup = Dedup.named(mode, shards);
    new FlinkDedupBench(
            dedup, records, repeatFraction, seed, workDir, capacity, checkpointIntervalMs,
            flinkConf, recordsPerSecond, restoreFrom, claimMode)
        .run();
    System.exit(0);
  }

  private static long parsePositive(String option, String value) {
    long parsed = (long) Double.parseDouble(value);
    if (parsed <= 1) {
      usage(option + " must be at least 2, got " + value);
    }
    return parsed;
  }

  private static void usage(String problem) {
    System.err.println("FlinkDedupBench: " + problem);
    System.err.println(
        "usage: FlinkDedupBench --mode " + String.join("|", Dedup.NAMES)
            + " --records N --work-dir DIR [--repeat-fraction F] [--seed S] [--shards S (bloom)]"
            + " [--capacity N (records per window; default: the stream's)]"
            + " [--checkpoint-interval-ms I (periodic checkpoints while the events run)]"
            + " [--flink-conf KEY=VALUE (a Flink option, say a RocksDB one; repeatable)]"
            + " [--records-per-s R (the events' rate at most: checkpoints of R x I records each,"
            + " whatever the machine's load)]"
            + " [--restore-from CHECKPOINT (only the restored probe)]"
            + " [--restore-mode claim|no_claim (how the probes restore; no_claim by default,"
            + " which the changelog backend refuses)]");
    System.exit(2);
  }

  private Configuration configuration() {
    Configuration conf = new Configuration();
    conf.set(StateBackendOptions.STATE_BACKEND, dedup.stateBackend());
    conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, workDir.resolve("checkpoints").toUri().toString());
    conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, dedup.stateBackend().equals("rocksdb"));
    conf.set(
        CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
    conf.set(RocksDBOptions.LOCAL_DIRECTORIES, workDir.resolve("rocksdb").toString());
    // BloomDedup reserves its window from the slot's managed memory (the hashmap backend takes
    // none); RocksDB gets the 512 MiB the baselines have always had. With both, the slot's
    // managed memory goes half to each (Flink's default consumer weights, 70:70).
    long window = dedup instanceof Dedup.Bloom ? dedup.reportedStateBytes(WINDOW, capacity()) : 0;
    long managed = Math.max(512L << 20, window);
    if (window > 0 && dedup.stateBackend().equals("rocksdb")) {
      managed = 2 * managed;
    }
    conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, new MemorySize(managed));
    conf.set(TaskManagerOptions.NUM_TASK_SLOTS, 1);
    // Any free port for the cluster's REST endpoint: another Flink JVM on the machine may hold 8081.
    conf.set(RestOptions.BIND_PORT, "0");
    if (checkpointIntervalMs > 0) {
      conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(checkpointIntervalMs));
      conf.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
      // Every periodic checkpoint's own figures, not only the last few, for the per-checkpoint
      // lines on stderr.
      conf.set(WebOptions.CHECKPOINTS_HISTORY_SIZE, Integer.MAX_VALUE);
    }
    conf.addAll(Configuration.fromMap(flinkConf));
    return conf;
  }

  private void run() throws Exception {
    Files.createDirectories(workDir);
    long expectedKept = generator.freshCount();
    Configuration conf = configuration();
    MiniCluster cluster =
        new MiniCluster(
            new MiniClusterConfiguration.Builder()
                .setConfiguration(conf)
                .setNumTaskManagers(1)
                .setNumSlotsPerTaskManager(1)
                .build());
    cluster.start();
    if (restoreFrom != null) {
      try {
        restoreOnly(cluster, conf);
      } finally {
        cluster.close();
      }
      return;
    }
    try {
      long heapBefore = usedHeapAfterGc();
      RunClock.reset(generator.lastId(), Set.of());
      StreamGraph main = mainJob(conf);
      JobID mainId = cluster.submitJob(main).get().getJobID();
      awaitLastId(cluster, mainId);
      double seconds = (RunClock.lastIdNanos() - RunClock.sourceStartNanos()) / 1e9;
      long kept = RunClock.kept();
      long heapState = usedHeapAfterGc() - heapBefore;
      long longestGapNanos = RunClock.longestGapNanos();
      CheckpointStatsSnapshot periodic =
          cluster.getExecutionGraph(mainId).get().getCheckpointStatsSnapshot();
      // Oldest first; what each periodic checkpoint uploaded (incremental: new files only), so
      // that they can be set beside what the dedup moved into keyed state (its DEBUG lines).
      List<AbstractCheckpointStats> history = periodic.getHistory().getCheckpoints();
      for (int i = history.size() - 1; i >= 0; --i) {
        AbstractCheckpointStats stats = history.get(i);
        System.err.printf(
            Locale.ROOT,
            "bench: checkpoint %d %s checkpointed_bytes=%d state_bytes=%d%n",
            stats.getCheckpointId(), stats.getStatus(), stats.getCheckpointedSize(),
            stats.getStateSize());
      }

      long checkpointStart = System.nanoTime();
      String checkpoint = triggerCheckpoint(cluster, mainId);
      double checkpointSeconds = (System.nanoTime() - checkpointStart) / 1e9;
      long checkpointBytes = bytesUnder(workDir.resolve("checkpoints").resolve(mainId.toString()));
      long rocksdbBytes = bytesUnder(workDir.resolve("rocksdb"));
      long reportedBytes = dedup.reportedStateBytes(WINDOW, capacity());
      cluster.cancelJob(mainId).get();
      awaitTermination(cluster, mainId);

      ProbeRun cold = probe(cluster, conf, null);
      ProbeRun restored = probe(cluster, conf, checkpoint);

      long stateBytes =
          switch (dedup.stateBackend()) {
            case "rocksdb" -> rocksdbBytes;
            default -> reportedBytes >= 0 ? reportedBytes : heapState;
          };
      System.out.println(
          String.format(
              Locale.ROOT,
              "mode=%s records=%d seconds=%.3f records_per_s=%.0f kept=%d expected_kept=%d"
                  + " extra_drops=%d state_bytes=%d heap_growth_bytes=%d checkpoint_s=%.3f"
                  + " checkpoint_bytes=%d cold_init_s=%.3f restore_init_s=%.3f cold_probe_s=%.3f"
                  + " restore_probe_s=%.3f restore_first_output_s=%.3f probe_kept=%d"
                  + " probe_expected_kept=%d"
                  + " probe_old_kept=%d false_drop_bound=%.0f capacity=%d"
                  + " checkpoint_interval_ms=%d periodic_checkpoints=%d"
                  + " periodic_checkpoint_bytes_avg=%d periodic_checkpoint_bytes_max=%d"
                  + " longest_sink_gap_ms=%.1f",
              dedup.name(), records, seconds, records / seconds, kept, expectedKept,
              expectedKept - kept, stateBytes, heapState, checkpointSeconds, checkpointBytes,
              cold.initializingSeconds, restored.initializingSeconds, cold.seconds, restored.seconds,
              restored.firstOutputSeconds, restored.kept, PROBES / 2, restored.oldKept,
              dedup.falseDropRate() * expectedKept, capacity, checkpointIntervalMs,
              periodic.getCounts().getNumberOfCompletedCheckpoints(),
              periodic.getSummaryStats().getCheckpointedSize().getAverage(),
              periodic.getSummaryStats().getCheckpointedSize().getMaximum(),
              longestGapNanos / 1e6));
      if (kept > expectedKept || restored.oldKept != 0) {
        throw new IllegalStateException(
            "a repeat got through: kept " + kept + " of " + expectedKept
                + " fresh records, and " + restored.oldKept + " old ids after the restore");
      }
    } finally {
      cluster.close();
    }
  }

  private void restoreOnly(MiniCluster cluster, Configuration conf) throws Exception {
    ProbeRun restored = probe(cluster, conf, restoreFrom);
    System.out.println(
        String.format(
            Locale.ROOT,
            "mode=%s records=%d capacity=%d restore_from=%s restore_init_s=%.3f"
                + " restore_probe_s=%.3f probe_kept=%d probe_expected_kept=%d probe_old_kept=%d",
            dedup.name(), records, capacity, restoreFrom, restored.initializingSeconds,
            restored.seconds, restored.kept, PROBES / 2, restored.oldKept));
    if (restored.oldKept != 0) {
      throw new IllegalStateException(restored.oldKept + " old ids kept after the restore");
    }
  }

  /** The records one window length holds. */
  private long capacity() {
    return capacity;
  }

  private StreamExecutionEnvironment environment(Configuration conf) {
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(1);
    return env;
  }

  private StreamGraph mainJob(Configuration conf) {
    StreamExecutionEnvironment env = environment(conf);
    TypeInformation<Event> type = TypeInformation.of(Event.class);
    DataStream<Event> events =
        env.fromSource(
                recordsPerSecond > 0
                    ? new DataGeneratorSource<>(
                        generator, records, RateLimiterStrategy.perSecond(recordsPerSecond), type)
                    : new DataGeneratorSource<>(generator, records, type),
                WatermarkStrategy.<Event>forMonotonousTimestamps()
                    .withTimestampAssigner((event, previous) -> event.timeMs),
                "events")
            .uid("events");
    // Emits one event a minute, filtered away: it only keeps the job (and so the dedup's state)
    // alive after the events run out. Its watermark stops at the end of the events' time so that
    // the end of the events does not move the dedup's event-time clock.
    long endMs = START_MS + SPAN_MS;
    DataStream<Event> keepAlive =
        env.fromSource(
                new DataGeneratorSource<>(
                    index -> new Event(0, endMs), Long.MAX_VALUE, RateLimiterStrategy.perSecond(1.0 / 60),
                    type),
                WatermarkStrategy.<Event>forMonotonousTimestamps()
                    .withTimestampAssigner((event, previous) -> event.timeMs),
                "keep-alive")
            .uid("keep-alive")
            .filter(event -> false)
            .uid("keep-alive-filter");
    dedup.apply(events.union(keepAlive), WINDOW, capacity()).sinkTo(new CountingSink()).uid("sink");
    StreamGraph graph = env.getStreamGraph();
    graph.setJobId(new JobID());
    return graph;
  }

  private record ProbeRun(
      double seconds, double initializingSeconds, double firstOutputSeconds, long kept,
      long oldKept) {}

  /** Even probes carry ids of the stream (spread over it), odd ones ids it never had. */
  private ProbeRun probe(MiniCluster cluster, Configuration conf, String checkpoint)
      throws Exception {
    StreamExecutionEnvironment env = environment(conf);
    EventGenerator stream = generator;
    long total = records;
    long step = Math.max(1, records / PROBES);
    long endMs = START_MS + SPAN_MS;
    DataStream<Event> probes =
        env.fromSource(
                new DataGeneratorSource<>(
                    index ->
                        new Event(
                            index % 2 == 0 ? stream.idOf(index * step % total)
                                : stream.freshId(total + index),
                            endMs),
                    PROBES, TypeInformation.of(Event.class)),
                WatermarkStrategy.<Event>forMonotonousTimestamps()
                    .withTimestampAssigner((event, previous) -> event.timeMs),
                "probes")
            .uid("probes");
    dedup.apply(probes, WINDOW, capacity()).sinkTo(new CountingSink()).uid("sink");
    StreamGraph graph = env.getStreamGraph();
    graph.setJobId(new JobID());
    if (checkpoint != null) {
      graph.setSavepointRestoreSettings(
          SavepointRestoreSettings.forPath(checkpoint, true, claimMode));
    }
    Set<Long> oldIds = new HashSet<>();
    for (long index = 0; index < PROBES; index += 2) {
      oldIds.add(stream.idOf(index * step % records));
    }
    RunClock.reset(Long.MIN_VALUE, oldIds);
    long start = System.nanoTime();
    JobID id = cluster.submitJob(graph).get().getJobID();
    cluster.requestJobResult(id).get().toJobExecutionResult(getClass().getClassLoader());
    double seconds = (System.nanoTime() - start) / 1e9;
    return new ProbeRun(
        seconds, initializingSeconds(cluster, id), (RunClock.firstOutputNanos() - start) / 1e9,
        RunClock.kept(), RunClock.oldKept());
  }

  /**
   * How long the job's non-source tasks spent initializing, the longest of them: a task restores
   * its state between INITIALIZING and RUNNING.
   */
  private static double initializingSeconds(MiniCluster cluster, JobID id) throws Exception {
    long longestMs = 0;
    for (AccessExecutionVertex vertex : cluster.getExecutionGraph(id).get().getAllExecutionVertices()) {
      if (!vertex.getTaskNameWithSubtaskIndex().startsWith("Source:")) {
        longestMs =
            Math.max(
                longestMs,
                vertex.getStateTimestamp(ExecutionState.RUNNING)
                    - vertex.getStateTimestamp(ExecutionState.INITIALIZING));
      }
    }
    return longestMs / 1e3;
  }

  /**
   * A checkpoint of the running job, its path. With periodic checkpoints, the events' source
   * task may be closing (it waits for a last checkpoint after its input ends) and decline the
   * first ones asked for; a few more tries get one once it has finished.
   */
  private static String triggerCheckpoint(MiniCluster cluster, JobID id) throws Exception {
    for (int attempt = 1; ; ++attempt) {
      try {
        return cluster.triggerCheckpoint(id).get(30, TimeUnit.MINUTES);
      } catch (ExecutionException e) {
        if (attempt == 10) {
          throw e;
        }
        Thread.sleep(1000);
      }
    }
  }

  private void awaitLastId(MiniCluster cluster, JobID id) throws Exception {
    while (RunClock.lastIdNanos() == 0) {
      JobStatus status = cluster.getJobStatus(id).get();
      if (status.isTerminalState()) {
        cluster.requestJobResult(id).get().toJobExecutionResult(getClass().getClassLoader());
        throw new IllegalStateException("the main job ended (" + status + ") before its last record");
      }
      Thread.sleep(20);
    }
  }

  private static void awaitTermination(MiniCluster cluster, JobID id) throws Exception {
    while (!cluster.getJobStatus(id).get().isGloballyTerminalState()) {
      Thread.sleep(20);
    }
  }

  private static long usedHeapAfterGc() {
    Runtime runtime = Runtime.getRuntime();
    for (int i = 0; i < 3; ++i) {
      System.gc();
    }
    return runtime.totalMemory() - runtime.freeMemory();
  }

  // Flink removes subsumed checkpoints while this walks the folder: a file or folder gone between
  // listing and reading is counted as gone, not an error.
  private static long bytesUnder(Path root) {
    final long[] total = {0};
    try {
      Files.walkFileTree(
          root,
          new SimpleFileVisitor<Path>() {
            @Override
            public FileVisitResult visitFile(Path file, BasicFileAttributes attributes) {
              if (attributes.isRegularFile()) {
                total[0] += attributes.size();
              }
              return FileVisitResult.CONTINUE;
            }

            @Override
            public FileVisitResult visitFileFailed(Path file, IOException e) throws IOException {
              return skipGone(e);
            }

            @Override
            public FileVisitResult postVisitDirectory(Path dir, IOException e) throws IOException {
              return e == null ? FileVisitResult.CONTINUE : skipGone(e);
            }

            private FileVisitResult skipGone(IOException e) throws IOException {
              if (e instanceof NoSuchFileException) {
                return FileVisitResult.CONTINUE;
              }
              throw e;
            }
          });
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return total[0];
  }
}
