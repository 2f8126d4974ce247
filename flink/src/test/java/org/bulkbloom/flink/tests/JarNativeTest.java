package org.bulkbloom.flink.tests;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributeView;
import java.nio.file.attribute.FileTime;
import java.util.List;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.bulkbloom.jni.BulkbloomNative;
import org.junit.jupiter.api.Test;

/**
 * The native library as the operator jar carries it: with no {@code -Dbulkbloom.jni.library},
 * nothing on java.library.path, a job keeps what the command line keeps, the JNI library and
 * Highway are mapped from the private folder they were extracted into, and that folder is gone,
 * as are the folders of killed JVMs' extractions (and only those). Run by native_from_jar.sh
 * twice: first {@link #main} with the arguments {@code CLI DIR} (before the system's libhwy is
 * hidden, which the command line needs) writes the command line's answer to DIR/kept.csv; then,
 * with the system's libhwy hidden, the test with -Dbulkbloom.test.scratch=DIR and
 * -Dbulkbloom.jni.tmpdir=TMP runs the job.
 */
public final class JarNativeTest {
  private static final long HOUR_MS = 3_600_000;

  /** Writes the command line's answer: arguments CLI DIR. */
  public static void main(String[] args) throws Exception {
    Records.cliKept(args[0], Files.createDirectories(Path.of(args[1])));
  }

  @Test
  void libraryFromTheOperatorJar() throws Exception {
    assertTrue(
        System.getProperty(BulkbloomNative.LIBRARY_PROPERTY) == null,
        "run without -D" + BulkbloomNative.LIBRARY_PROPERTY);
    final TreeSet<Long> expected =
        Records.readKept(Path.of(Records.property("bulkbloom.test.scratch")).resolve("kept.csv"));
    final Path extractedUnder =
        Path.of(Records.property(BulkbloomNative.TMPDIR_PROPERTY)).toRealPath();
    // What JVMs killed while extracting left (a minute old, the lock free or never taken) goes;
    // a folder whose lock is held, a young one and a link to a folder stay, with what they hold.
    final Path abandoned = planted(extractedUnder.resolve("bulkbloom-jni-abandoned"), true, true);
    final Path unlocked = planted(extractedUnder.resolve("bulkbloom-jni-unlocked"), false, true);
    final Path held = planted(extractedUnder.resolve("bulkbloom-jni-held"), true, true);
    final Path heldElsewhere =
        planted(extractedUnder.resolve("bulkbloom-jni-held-elsewhere"), true, true);
    final Path young = planted(extractedUnder.resolve("bulkbloom-jni-young"), true, false);
    final Path elsewhere =
        planted(Path.of(Records.property("bulkbloom.test.scratch")).resolve("elsewhere"), true,
            true);
    final Path link =
        Files.createSymbolicLink(extractedUnder.resolve("bulkbloom-jni-link"), elsewhere);
    final FileTime hourAgo = FileTime.fromMillis(System.currentTimeMillis() - HOUR_MS);
    Files.getFileAttributeView(link, BasicFileAttributeView.class, LinkOption.NOFOLLOW_LINKS)
        .setTimes(hourAgo, null, null);
    final List<Path> kept = List.of(held, heldElsewhere, young, link);
    // Another process's lock on a folder: a POSIX record lock, as a FileChannel's is on Linux.
    final Process locker =
        new ProcessBuilder(
                "python3",
                "-c",
                "import fcntl, sys, time\nf = open(sys.argv[1], 'r+')\n"
                    + "fcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(600)",
                heldElsewhere.resolve(".lock").toString())
            .redirectErrorStream(true)
            .start();

    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(2);
    final TreeSet<Long> keptIds = new TreeSet<>();
    try {
      final String said =
          new BufferedReader(new InputStreamReader(locker.getInputStream(), UTF_8)).readLine();
      assertTrue("locked".equals(said), "the locking process said " + said);
      try (FileChannel lock = FileChannel.open(held.resolve(".lock"), StandardOpenOption.WRITE);
          FileLock holding = lock.lock();
          CloseableIterator<Long> ids =
              // Fixed-size shards have the command line's layout, so its output is the
              // expectation.
              Records.dedup()
                  .fixedSizeShards()
                  .apply(Records.source(env, 0))
                  .map(r -> r.f2)
                  .executeAndCollect("jar")) {
        ids.forEachRemaining(keptIds::add);
      }
    } finally {
      locker.destroyForcibly();
    }
    Records.checkSame(expected, keptIds, "the library from the operator jar");
    assertTrue(!Files.exists(abandoned) && !Files.exists(unlocked), "abandoned folders left");
    for (Path folder : List.of(held, heldElsewhere, young, elsewhere)) {
      assertTrue(Files.exists(folder.resolve("libbulkbloom_jni.so")), folder + " was emptied");
    }

    final List<String> maps = Files.readAllLines(Path.of("/proc/self/maps"));
    for (String library : List.of("libbulkbloom_jni.so", "libhwy.so.1")) {
      final List<String> paths =
          maps.stream()
              .filter(line -> line.contains("/" + library))
              .map(line -> line.substring(line.indexOf('/')))
              .distinct()
              .toList();
      assertTrue(!paths.isEmpty(), library + " is not mapped");
      for (String path : paths) {
        assertTrue(
            path.startsWith(extractedUnder + "/bulkbloom-jni-") && path.endsWith(" (deleted)"),
            library + " is mapped from " + path + ", not from a deleted folder under "
                + extractedUnder);
      }
      System.out.println(library + " mapped from " + paths);
    }
    try (Stream<Path> left = Files.list(extractedUnder)) {
      final List<Path> files = left.filter(file -> !kept.contains(file)).toList();
      assertTrue(files.isEmpty(), "the extraction left " + files + " behind");
    }
  }

  /** A folder as an extraction leaves it: a library, a lock file if `locked`, `old` or not. */
  private static Path planted(Path folder, boolean locked, boolean old) throws Exception {
    Files.createDirectories(folder);
    Files.writeString(folder.resolve("libbulkbloom_jni.so"), "not a library");
    if (locked) {
      Files.writeString(folder.resolve(".lock"), "");
    }
    if (old) {
      Files.setLastModifiedTime(folder, FileTime.fromMillis(System.currentTimeMillis() - HOUR_MS));
    }
    return folder;
  }
}
