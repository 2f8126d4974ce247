package org.bulkbloom.flink.bench;

import java.time.Duration;
import java.util.List;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.datastream.DataStream;

/** The dedups the benchmark compares; each applies itself to the stream with a window T. */
public interface Dedup {
  List<String> NAMES = List.of("ttl-hashmap", "ttl-rocksdb");

  String name();

  /** Flink's state backend for the job: "hashmap" or "rocksdb". */
  String stateBackend();

  /**
   * The dedup stage for a window T that holds at most {@code capacity} records; its stateful
   * operator carries the uid {@link FlinkDedupBench#DEDUP_UID}.
   */
  DataStream<Event> apply(DataStream<Event> events, Duration window, long capacity);

  /** The live state's size as the dedup itself reports it, or -1 if it does not. */
  default long reportedStateBytes(Duration window, long capacity) {
    return -1;
  }

  /** The rate at which the dedup may drop a fresh record (0 for an exact one). */
  default double falseDropRate() {
    return 0;
  }

  static Dedup named(String name) {
    return switch (name) {
      case "ttl-hashmap" -> new TtlBaseline(name, "hashmap");
      case "ttl-rocksdb" -> new TtlBaseline(name, "rocksdb");
      default -> throw new IllegalArgumentException(
          "unknown --mode " + name + "; expected one of " + NAMES);
    };
  }

  /** keyBy(id) into {@link TtlDedup}. */
  record TtlBaseline(String name, String stateBackend) implements Dedup {
    @Override
    public DataStream<Event> apply(DataStream<Event> events, Duration window, long capacity) {
      return events
          .keyBy(event -> event.id, Types.LONG)
          .process(new TtlDedup(window))
          .uid(FlinkDedupBench.DEDUP_UID)
          .returns(Event.class);
    }
  }
}
