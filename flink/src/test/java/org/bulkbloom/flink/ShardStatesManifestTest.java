package org.bulkbloom.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.Arrays;
import org.bulkbloom.jni.NativeWindowShards;
import org.bulkbloom.jni.NativeWindowShards.Snapshot;
import org.junit.jupiter.api.Test;

/**
 * The manifest ShardStates keeps per shard (docs/FORMAT.md "Flink keyed state"). A shard taken
 * apart before its clock started names its parts as if the clock stood at period 0; version 3
 * marks them so, and versions 1 and 2, stored before the mark, take it from their metadata. A
 * part kept from then is never taken for the part of its period once the clock runs: the clock
 * may start just before 0, and that later part holds keys.
 */
public final class ShardStatesManifestTest {
  private static final int SHARDS = 2;

  /** A version 2 manifest of {@code snapshot}'s parts, each a base with no chunk and no log. */
  private static byte[] version2(Snapshot snapshot) throws IOException {
    final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    final DataOutputStream out = new DataOutputStream(bytes);
    out.writeInt(2);
    out.writeLong(1 + snapshot.numParts());
    out.writeInt(snapshot.metadata.length);
    out.write(snapshot.metadata);
    out.writeInt(snapshot.numParts());
    for (int i = 0; i < snapshot.numParts(); ++i) {
      out.writeLong(snapshot.period(i));
      out.writeInt(snapshot.part(i));
      out.writeLong(snapshot.blocks(i));
      out.writeLong(snapshot.bytes(i));
      out.writeLong(1 + i); // the base's image number
      out.writeInt(0); // no chunk stored
      out.writeInt(-1); // no fold in progress
      out.writeInt(0);
      out.writeInt(0); // no log
    }
    out.flush();
    return bytes.toByteArray();
  }

  private static void expectParts(ShardStates.Manifest m, Snapshot snapshot, boolean beforeClock) {
    assertEquals(snapshot.numParts(), m.parts.size());
    for (int i = 0; i < snapshot.numParts(); ++i) {
      assertEquals(beforeClock, m.parts.get(i).beforeClock, "part " + i);
      assertEquals(beforeClock, snapshot.beforeClock(i), "part " + i);
      assertNotNull(m.find(snapshot, i), "part " + i + " of the snapshot stored");
    }
  }

  @Test
  void aPartTakenBeforeTheClockIsNotTheLaterPartOfItsPeriod() throws IOException {
    try (NativeWindowShards window =
        new NativeWindowShards(100, 0, 4, 0.01, 20_000, 7, SHARDS, true, 0)) {
      for (int s = 0; s < SHARDS; ++s) {
        window.addEmpty(s);
        window.enableChangeLog(s);
      }
      final Snapshot before = window.takeSnapshot(0, Long.MAX_VALUE, ShardStates.CHUNK_BYTES);
      // Periods are 34 units: the clock starts in period -1 and moves on to 0.
      final long[] keys = new long[200];
      final long[] clocks = new long[keys.length];
      for (int i = 0; i < keys.length; ++i) {
        keys[i] = i;
      }
      Arrays.fill(clocks, -1);
      window.dedup(keys, window.shardOf(keys), clocks, keys.length, new byte[keys.length]);
      window.advanceTo(0);
      final Snapshot after = window.takeSnapshot(0, Long.MAX_VALUE, ShardStates.CHUNK_BYTES);

      for (Snapshot snapshot : new Snapshot[] {before, after}) {
        final boolean beforeClock = snapshot == before;
        final ShardStates.Manifest old = ShardStates.Manifest.decode(version2(snapshot), 0);
        expectParts(old, snapshot, beforeClock);
        expectParts(ShardStates.Manifest.decode(old.encode(), 0), snapshot, beforeClock);
      }
      // Part 0 of period -1 with the keys that came at -1, and the empty one kept from before.
      final int sealed = after.numParts() - 2;
      assertEquals(-1, after.period(sealed));
      for (ShardStates.Manifest kept :
          new ShardStates.Manifest[] {
            ShardStates.Manifest.decode(version2(before), 0),
            ShardStates.Manifest.decode(ShardStates.Manifest.decode(version2(before), 0).encode(), 0)
          }) {
        assertNull(kept.find(after, sealed), "the part of period -1 taken before the clock");
      }
    }
  }
}
