package org.bulkbloom.flink.bench;

import java.time.Duration;
import java.util.List;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.bulkbloom.flink.BloomDedup;

/** The dedups the benchmark compares; each applies itself to the stream with a window T. */
public interface Dedup {
  List<String> NAMES = List.of("bloom", "bloom-rocksdb", "ttl-hashmap", "ttl-rocksdb");

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

  /** The dedup called {@code name}; {@code shards} (0: the default) applies to bloom only. */
  static Dedup named(String name, int shards) {
    return switch (name) {
      case "bloom" -> new Bloom(shards == 0 ? BloomDedup.DEFAULT_SHARDS : shards, "hashmap");
      case "bloom-rocksdb" ->
          new Bloom(shards == 0 ? BloomDedup.DEFAULT_SHARDS : shards, "rocksdb");
      case "ttl-hashmap" -> new TtlBaseline(name, "hashmap");
      case "ttl-rocksdb" -> new TtlBaseline(name, "rocksdb");
      default -> throw new IllegalArgumentException(
          "unknown --mode " + name + "; expected one of " + NAMES);
    };
  }

  /**
   * bulkbloom's {@link BloomDedup} on the events' time, at the false-drop rate the users
   * run with. Its state is keyed state: parts written once, the open part as a base plus logs; on
   * the hashmap backend a full copy on the heap, on RocksDB ("bloom-rocksdb") with incremental
   * checkpoints.
   */
  record Bloom(int shards, String stateBackend) implements Dedup {
    static final double FPR = 0.001;

    private BloomDedup<Event> dedup(Duration window, long capacity) {
      return BloomDedup.<Event>byLong(event -> event.id)
          .window(window)
          .capacity(capacity)
          .fpr(FPR)
          .shards(shards);
    }

    @Override
    public String name() {
      final String name = stateBackend.equals("rocksdb") ? "bloom-rocksdb" : "bloom";
      return shards == BloomDedup.DEFAULT_SHARDS ? name : name + "-" + shards + "shards";
    }

    @Override
    public DataStream<Event> apply(DataStream<Event> events, Duration window, long capacity) {
      return dedup(window, capacity).apply(events).uid(FlinkDedupBench.DEDUP_UID);
    }

    @Override
    public long reportedStateBytes(Duration window, long capacity) {
      return dedup(window, capacity).sizing().memoryBytes;
    }

    @Override
    public double falseDropRate() {
      return FPR;
    }
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
