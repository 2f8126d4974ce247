package org.bulkbloom.flink;

import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.streaming.api.operators.KeyContext;

/**
 * The keyed state of one operator in memory, for tests of {@link ShardStates} without a
 * MiniCluster: each state's value per Flink key, with counts of what was written.
 */
final class MemoryKeyedState implements KeyContext {
  final Map<Object, byte[]> manifests = new HashMap<>();
  final Map<Object, Map<Long, byte[]>> chunks = new HashMap<>();
  Object key;
  // Per Flink key, the bytes put and the chunks removed since the counts were last cleared.
  final Map<Object, Long> put = new HashMap<>();
  final Map<Object, Long> removed = new HashMap<>();
  // Bytes of manifests written, over all keys, since last cleared.
  long manifestBytes;

  @Override
  public void setCurrentKey(Object key) {
    this.key = key;
  }

  @Override
  public Object getCurrentKey() {
    return key;
  }

  /** What a checkpoint of this state restores: the same values (chunks are never changed). */
  MemoryKeyedState copy() {
    final MemoryKeyedState c = new MemoryKeyedState();
    c.manifests.putAll(manifests);
    chunks.forEach((k, map) -> c.chunks.put(k, new HashMap<>(map)));
    return c;
  }

  Map<Long, byte[]> map() {
    return chunks.computeIfAbsent(key, k -> new HashMap<>());
  }

  ValueState<byte[]> manifestState() {
    return new ValueState<>() {
      @Override
      public byte[] value() {
        return manifests.get(key);
      }

      @Override
      public void update(byte[] value) {
        manifestBytes += value.length;
        manifests.put(key, value);
      }

      @Override
      public void clear() {
        manifests.remove(key);
      }
    };
  }

  MapState<Long, byte[]> chunkState() {
    return new MapState<>() {
      @Override
      public byte[] get(Long k) {
        return map().get(k);
      }

      @Override
      public void put(Long k, byte[] v) {
        put.merge(key, (long) v.length, Long::sum);
        map().put(k, v);
      }

      @Override
      public void putAll(Map<Long, byte[]> m) {
        m.forEach(this::put);
      }

      @Override
      public void remove(Long k) {
        if (map().remove(k) != null) {
          removed.merge(key, 1L, Long::sum);
        }
      }

      @Override
      public boolean contains(Long k) {
        return map().containsKey(k);
      }

      @Override
      public Iterable<Map.Entry<Long, byte[]>> entries() {
        return map().entrySet();
      }

      @Override
      public Iterable<Long> keys() {
        return map().keySet();
      }

      @Override
      public Iterable<byte[]> values() {
        return map().values();
      }

      @Override
      public Iterator<Map.Entry<Long, byte[]>> iterator() {
        return map().entrySet().iterator();
      }

      @Override
      public boolean isEmpty() {
        return map().isEmpty();
      }

      @Override
      public void clear() {
        chunks.remove(key);
      }
    };
  }
}
