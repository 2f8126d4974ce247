package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
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
 * Highway are mapped from the private folder they were extracted into, and that folder is gone.
 * Run by native_from_jar.sh twice: first {@link #main} with the arguments {@code CLI DIR} (before
 * the system's libhwy is hidden, which the command line needs) writes the command line's answer to
 * DIR/kept.csv; then, with the system's libhwy hidden, the test with -Dbulkbloom.test.scratch=DIR
 * and -Dbulkbloom.jni.tmpdir=TMP runs the job.
 */
public final class JarNativeTest {
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

    final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(2);
    final TreeSet<Long> kept = new TreeSet<>();
    try (CloseableIterator<Long> ids =
        // Fixed-size shards have the command line's layout, so its output is the expectation.
        Records.dedup()
            .fixedSizeShards()
            .apply(Records.source(env, 0))
            .map(r -> r.f2)
            .executeAndCollect("jar")) {
      ids.forEachRemaining(kept::add);
    }
    Records.checkSame(expected, kept, "the library from the operator jar");

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
      final List<Path> files = left.toList();
      assertTrue(files.isEmpty(), "the extraction left " + files + " behind");
    }
  }
}
