package org.bulkbloom.jni;

/**
 * Loads bulkbloom's JNI library once per JVM.
 *
 * <p>The JVM ties a native library to the class loader that loaded it, and refuses to load the
 * same file from a second one ("already loaded in another classloader"). Flink gives every job
 * its own child-first class loader, so this class (and every class with native methods) must be
 * loaded by the parent: put {@code bulkbloom-native.jar} in Flink's {@code lib/} folder and add
 * {@code classloader.parent-first-patterns.additional: org.bulkbloom.jni.} to the Flink
 * configuration. Jobs then share this one loaded library, however many times they are submitted.
 *
 * <p>Where the library is: the system property {@code bulkbloom.jni.library} (a file path), else
 * {@code libbulkbloom_jni.so} on {@code java.library.path}.
 */
public final class BulkbloomNative {
  /** The system property naming the library file. */
  public static final String LIBRARY_PROPERTY = "bulkbloom.jni.library";

  private static boolean loaded;

  private BulkbloomNative() {}

  /** Loads the library unless this class already did; safe to call from any thread. */
  public static synchronized void load() {
    if (loaded) {
      return;
    }
    final String path = System.getProperty(LIBRARY_PROPERTY);
    try {
      if (path != null && !path.isEmpty()) {
        System.load(path);
      } else {
        System.loadLibrary("bulkbloom_jni");
      }
    } catch (UnsatisfiedLinkError e) {
      final UnsatisfiedLinkError error =
          new UnsatisfiedLinkError(
              "bulkbloom: cannot load the JNI library "
                  + (path != null && !path.isEmpty()
                      ? path
                      : "bulkbloom_jni from java.library.path (or set -D" + LIBRARY_PROPERTY + ")")
                  + " in class loader "
                  + BulkbloomNative.class.getClassLoader()
                  + ": "
                  + e.getMessage()
                  + ". Under Flink, bulkbloom-native.jar belongs on the parent class path (Flink's"
                  + " lib/) with classloader.parent-first-patterns.additional: org.bulkbloom.jni.");
      error.initCause(e);
      throw error;
    }
    loaded = true;
  }
}
