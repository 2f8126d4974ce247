package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Metric;
import org.apache.flink.metrics.MetricConfig;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;

/**
 * A metric reporter for the MiniCluster of this JVM that keeps every counter of the operators'
 * {@code bulkbloom} groups, so that a test reads their final values after the job. Found through
 * META-INF/services (the test resources on the class path) when {@link #enable} names it.
 */
public final class CountingReporter implements MetricReporter, MetricReporterFactory {
  private static final Map<String, List<Counter>> COUNTERS = new ConcurrentHashMap<>();

  /** Reports the metrics of the cluster that {@code conf} starts to this class; forgets earlier. */
  static void enable(Configuration conf) {
    COUNTERS.clear();
    conf.setString("metrics.reporter.counting.factory.class", CountingReporter.class.getName());
  }

  /** The sum over subtasks of counter {@code name} of the bulkbloom group; fails if none. */
  static long sum(String name) {
    final List<Counter> counters = COUNTERS.get(name);
    assertNotNull(counters, "no bulkbloom counter " + name + " was registered");
    return counters.stream().mapToLong(Counter::getCount).sum();
  }

  @Override
  public MetricReporter createMetricReporter(Properties properties) {
    return this;
  }

  @Override
  public void open(MetricConfig config) {}

  @Override
  public void close() {}

  @Override
  public void notifyOfAddedMetric(Metric metric, String name, MetricGroup group) {
    final String[] scope = group.getScopeComponents();
    if (metric instanceof Counter && scope.length > 0 && scope[scope.length - 1].equals("bulkbloom")) {
      COUNTERS.computeIfAbsent(name, n -> new CopyOnWriteArrayList<>()).add((Counter) metric);
    }
  }

  // Removed when the job ends; the counters keep their final values for sum().
  @Override
  public void notifyOfRemovedMetric(Metric metric, String name, MetricGroup group) {}
}
