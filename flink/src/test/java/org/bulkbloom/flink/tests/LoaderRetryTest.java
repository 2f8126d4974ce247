package org.bulkbloom.flink.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.bulkbloom.jni.BulkbloomNative;
import org.bulkbloom.jni.NativeWindowShards;
import org.junit.jupiter.api.Test;

/**
 * A JNI library that fails to load says why at every use, and loads at the next use once the
 * cause is gone, in the same class loader (a Flink job restarted on a TaskManager keeps its
 * loader). Runs in a JVM of its own that has not loaded the library yet.
 */
public final class LoaderRetryTest {
  private static NativeWindowShards window() {
    return new NativeWindowShards(100, 0, 4, 0.01, 10_000, 0, 4, false, 0);
  }

  @Test
  void aFailedLoadIsReportedEachTimeAndTriedAgain() {
    final String library = System.getProperty(BulkbloomNative.LIBRARY_PROPERTY);
    final String missing = library + ".missing";
    System.setProperty(BulkbloomNative.LIBRARY_PROPERTY, missing);
    try {
      for (int use = 0; use < 2; ++use) {
        final UnsatisfiedLinkError error = assertThrows(UnsatisfiedLinkError.class,
            LoaderRetryTest::window, "use " + use);
        assertTrue(error.getMessage().contains(missing), "use " + use + ": " + error.getMessage());
      }
      assertThrows(UnsatisfiedLinkError.class,
          () -> NativeWindowShards.size(100, 0, 4, 0.01, 10_000, 0, 4, false));
    } finally {
      System.setProperty(BulkbloomNative.LIBRARY_PROPERTY, library);
    }
    try (NativeWindowShards window = window()) {
      window.addEmpty(0);
      assertEquals(1, NativeWindowShards.liveInstances());
    }
  }
}
