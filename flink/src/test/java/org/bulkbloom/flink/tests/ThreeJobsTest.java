package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.junit.jupiter.api.Test;

/**
 * Three jobs in one JVM, each with its own child-first user-code class loader over jars that
 * include the JNI binding (as a fat job jar would): with org.bulkbloom.jni. loaded parent-first,
 * all three share the one loaded library and give the same answers. Property bulkbloom.test.jars:
 * the jars to ship with each job (operator, native binding, tests), a class path.
 */
public final class ThreeJobsTest {
  @Test
  void threeJobsShareTheLibrary() throws Exception {
    final List<String> jars = new ArrayList<>();
    for (String jar : Records.property("bulkbloom.test.jars").split(File.pathSeparator)) {
      jars.add(Path.of(jar).toUri().toString());
    }
    TreeSet<Long> first = null;
    for (int job = 1; job <= 3; ++job) {
      final Configuration conf = new Configuration();
      conf.set(PipelineOptions.JARS, jars);
      conf.set(CoreOptions.ALWAYS_PARENT_FIRST_LOADER_PATTERNS_ADDITIONAL, List.of("org.bulkbloom.jni."));
      final StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
      env.setParallelism(2);
      final TreeSet<Long> kept = new TreeSet<>();
      try (CloseableIterator<Long> ids =
          Records.dedup().apply(Records.source(env, 0)).map(r -> r.f2).executeAndCollect("job " + job)) {
        ids.forEachRemaining(kept::add);
      }
      assertTrue(!kept.isEmpty(), "job " + job + " kept nothing");
      if (first == null) {
        first = kept;
      } else {
        Records.checkSame(first, kept, "job " + job + " against job 1");
      }
    }
  }
}
