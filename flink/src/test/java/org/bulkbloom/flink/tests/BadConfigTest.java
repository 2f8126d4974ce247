package org.bulkbloom.flink.tests;

import java.time.Duration;
import java.util.function.Consumer;
import org.apache.flink.api.java.tuple.Tuple3;
import org.bulkbloom.flink.BloomDedup;
import org.junit.jupiter.api.Test;

/** A bad configuration throws IllegalArgumentException naming the value when the job is built. */
public final class BadConfigTest {
  private static void expect(
      String expectedText, Consumer<BloomDedup<Tuple3<String, Long, Long>>> change) {
    final BloomDedup<Tuple3<String, Long, Long>> dedup = Records.dedup();
    change.accept(dedup);
    Records.expect(IllegalArgumentException.class, expectedText, dedup::sizing);
  }

  @Test
  void badConfigurationsAreRejected() {
    Records.dedup().sizing();
    expect("window PT0S must be a positive duration", d -> d.window(Duration.ZERO));
    expect("window PT-1S must be a positive duration", d -> d.window(Duration.ofSeconds(-1)));
    expect("fpr 1.5 is out of range", d -> d.fpr(1.5));
    expect("fpr 0.0 is out of range", d -> d.fpr(0));
    expect("capacity 0 is out of range", d -> d.capacity(0));
    // From the C++ library, through JNI.
    expect("generations 1 is out of range", d -> d.generations(1));
    expect("shards 0 is out of range", d -> d.shards(0));
    expect("shards 100000 is out of range", d -> d.shards(100_000));
    // Fixed-size shards are at most the configured blocks; sized ones round the blocks up to S.
    expect("the blocks of each generation", d -> d.capacity(10).shards(1000).fixedSizeShards());
    expect("maxCapacity 10 must be at least the capacity", d -> d.maxCapacity(10));
    expect("lateness PT-1S must be 0 or more", d -> d.lateness(Duration.ofSeconds(-1)));
    expect("must be whole multiples of clockUnit", d -> d.window(Duration.ofMillis(1500)));
    expect("whole number of milliseconds", d -> d.clockUnit(Duration.ofNanos(10)));
    expect("batchSize 0 must be >= 1", d -> d.batchSize(0));
    expect("maxFuture PT0S must be a positive duration", d -> d.maxFuture(Duration.ZERO));
    expect("maxFuture null must be a positive duration", d -> d.maxFuture(null));
  }
}
