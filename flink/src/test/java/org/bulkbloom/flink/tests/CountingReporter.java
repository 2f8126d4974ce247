package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.Metric;
import org.apache.flink.metrics.MetricConfig;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;

/**
 * A metric reporter for the MiniCluster of this JVM that keeps every counter and gauge of the
 * operators' {@code bulkbloom} groups, so that a test reads their values during and after the job.
 * Found through META-INF/services (the test resources on the class path) when {@link #enable} names
 * it.
 */
public final class CountingReporter implements MetricReporter, MetricReporterFactory {
  private static final Map<String, List<Counter>> COUNTERS = new ConcurrentHashMap<>();
  private static final Map<String, List<Gauge<?>>> GAUGES = new ConcurrentHashMap<>();

  /** Reports the metrics of the cluster that {@code conf} starts to this class; forgets earlier. */
  static void enable(Configuration conf) {
    COUNTERS.clear();
    GAUGES.clear();
    conf.setString("metrics.reporter.counting.factory.class", CountingReporter.class.getName());
  }

  /**
   * The value now of gauge {@code name} of the bulkbloom group of the only subtask that registered
   * it; fails if none or several did.
   */
  static Object gauge(String name) {
    final List<Gauge<?>> gauges = GAUGES.get(name);
    assertNotNull(gauges, "no bulkbloom gauge " + name + " was registered");
    assertEquals(1, gauges.size(), "subtasks with a bulkbloom gauge " + name);
    return gauges.get(0).getValue();
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
    if (scope.length == 0 || !scope[scope.length - 1].equals("bulkbloom")) {
      return;
    }
    if (metric instanceof Counter) {
      COUNTERS.computeIfAbsent(name, n -> new CopyOnWriteArrayList<>()).add((Counter) metric);
    } else if (metric instanceof Gauge) {
      GAUGES.computeIfAbsent(name, n -> new CopyOnWriteArrayList<>()).add((Gauge<?>) metric);
    }
  }

  // Removed when the job ends; the counters keep their final values for sum(), the gauges read
  // the closed operator's last values.
  @Override
  public void notifyOfRemovedMetric(Metric metric, String name, MetricGroup group) {}
}
