package org.bulkbloom.jni;

import java.io.IOException;
import java.io.InputStream;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Loads bulkbloom's JNI library once per class loader.
 *
 * <p>Where the library comes from, first found wins:
 *
 * <ol>
 *   <li>the system property {@code bulkbloom.jni.library} (a file path; the file's own
 *       dependencies are then the system's to find);
 *   <li>the copy inside this jar, {@code org/bulkbloom/jni/linux-<arch>/}: the JNI library (built
 *       with libstdc++ and libgcc linked in) and the shared libraries it needs beyond glibc and
 *       libstdc++ (Highway's {@code libhwy.so.1}), listed in load order in that folder's {@code
 *       libraries} file. They are copied into a new private folder under {@code
 *       bulkbloom.jni.tmpdir} (default {@code java.io.tmpdir}; name an exec-mounted one where /tmp
 *       is noexec), loaded by absolute path, dependencies first, and deleted at once: a loaded
 *       library stays mapped. The folder's {@code .lock} is locked from its creation to its
 *       removal, so a JVM killed in between leaves a folder no one holds; the next extraction
 *       under the same folder removes such folders once they are a minute old;
 *   <li>{@code libbulkbloom_jni.so} on {@code java.library.path}.
 * </ol>
 *
 * <p>The JVM ties a native library file to the class loader that loaded it. Each class loader that
 * loads this class extracts its own copy, so jobs that each ship the operator jar (Flink's
 * child-first class loaders) each get theirs. To share one copy between jobs, put the jar in
 * Flink's {@code lib/} folder and add {@code classloader.parent-first-patterns.additional:
 * org.bulkbloom.jni.} to the Flink configuration; the system property needs that, as one file
 * loads in one class loader only.
 */
public final class BulkbloomNative {
  /** The system property naming the library file. */
  public static final String LIBRARY_PROPERTY = "bulkbloom.jni.library";

  /** The system property naming the folder the bundled libraries are extracted under. */
  public static final String TMPDIR_PROPERTY = "bulkbloom.jni.tmpdir";

  private static boolean loaded;

  // What the extraction folders are named, and their lock file.
  private static final String EXTRACTED_PREFIX = "bulkbloom-jni-";
  private static final String LOCK = ".lock";
  // A folder younger than this may be one whose lock is not taken yet.
  private static final long ABANDONED_AFTER_MS = 60_000;

  private BulkbloomNative() {}

  /** Loads the library unless this class already did; safe to call from any thread. */
  public static synchronized void load() {
    if (loaded) {
      return;
    }
    final String path = System.getProperty(LIBRARY_PROPERTY);
    final String folder = bundleFolder();
    String source = "bulkbloom_jni from java.library.path";
    try {
      if (path != null && !path.isEmpty()) {
        source = path;
        System.load(path);
      } else if (BulkbloomNative.class.getResource(folder + "libraries") != null) {
        source =
            "this jar's "
                + folder.substring(1)
                + ", extracted under "
                + System.getProperty(TMPDIR_PROPERTY, System.getProperty("java.io.tmpdir"))
                + " (mounted noexec? name another folder with -D"
                + TMPDIR_PROPERTY
                + ")";
        loadBundled(folder);
      } else {
        System.loadLibrary("bulkbloom_jni");
      }
    } catch (UnsatisfiedLinkError e) {
      final UnsatisfiedLinkError error =
          new UnsatisfiedLinkError(
              "bulkbloom: cannot load the JNI library from "
                  + source
                  + " (set -D"
                  + LIBRARY_PROPERTY
                  + " to a file to override) in class loader "
                  + BulkbloomNative.class.getClassLoader()
                  + ": "
                  + e.getMessage());
      error.initCause(e);
      throw error;
    }
    loaded = true;
  }

  /** The resource folder of this platform's libraries, e.g. /org/bulkbloom/jni/linux-x86_64/. */
  private static String bundleFolder() {
    final String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
    final String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
    final String machine =
        arch.equals("amd64") || arch.equals("x86_64")
            ? "x86_64"
            : arch.equals("aarch64") || arch.equals("arm64") ? "aarch64" : arch;
    return "/org/bulkbloom/jni/" + (os.startsWith("linux") ? "linux" : os) + "-" + machine + "/";
  }

  private static void loadBundled(String folder) {
    final List<String> names = new ArrayList<>();
    final String tmp = System.getProperty(TMPDIR_PROPERTY, System.getProperty("java.io.tmpdir"));
    Path dir = null;
    FileChannel lock = null;
    try {
      try (InputStream in = BulkbloomNative.class.getResourceAsStream(folder + "libraries")) {
        for (String line : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
          if (!line.isBlank()) {
            names.add(line.strip());
          }
        }
      }
      removeAbandoned(Path.of(tmp));
      dir =
          Files.createTempDirectory(
              Path.of(tmp),
              EXTRACTED_PREFIX,
              PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
      lock = FileChannel.open(dir.resolve(LOCK), StandardOpenOption.CREATE_NEW,
          StandardOpenOption.WRITE);
      lock.lock();
      final List<Path> files = new ArrayList<>();
      for (String name : names) {
        final Path file = dir.resolve(name);
        try (InputStream in = BulkbloomNative.class.getResourceAsStream(folder + name)) {
          if (in == null) {
            throw new IOException(folder + "libraries names " + name + ", which the jar lacks");
          }
          Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
        }
        files.add(file);
      }
      // Dependencies first, by absolute path: the JNI library's own lookup of libhwy.so.1 then
      // finds the one already loaded (by its soname), whatever the system holds.
      for (Path file : files) {
        System.load(file.toString());
      }
    } catch (IOException e) {
      throw new UnsatisfiedLinkError(
          "cannot extract " + names + " under " + tmp + " (-D" + TMPDIR_PROPERTY + "): " + e);
    } finally {
      if (dir != null) {
        deleteQuietly(dir, names);
      }
      if (lock != null) {
        try {
          lock.close(); // releases the lock, after the folder is gone
        } catch (IOException e) {
          System.err.println("bulkbloom: could not close " + dir.resolve(LOCK) + ": " + e);
        }
      }
    }
  }

  /**
   * Removes the extraction folders under {@code tmp} that a JVM killed between their creation and
   * their removal left: a minute old (a folder is locked within moments of its creation) and
   * their {@code .lock} held by no one (or never made). Anything it cannot remove stays.
   */
  private static void removeAbandoned(Path tmp) {
    final long oldest = System.currentTimeMillis() - ABANDONED_AFTER_MS;
    try (DirectoryStream<Path> folders = Files.newDirectoryStream(tmp, EXTRACTED_PREFIX + "*")) {
      for (Path folder : folders) {
        try {
          if (!Files.isDirectory(folder, LinkOption.NOFOLLOW_LINKS)
              || Files.getLastModifiedTime(folder, LinkOption.NOFOLLOW_LINKS).toMillis() > oldest
              || held(folder.resolve(LOCK))) {
            continue;
          }
          try (DirectoryStream<Path> files = Files.newDirectoryStream(folder)) {
            for (Path file : files) {
              Files.delete(file); // a link is removed, not followed; a folder in it stays
            }
          }
          Files.delete(folder);
        } catch (IOException e) {
          // Another user's, or removed by another JVM meanwhile: not this one's to clean.
        }
      }
    } catch (IOException e) {
      // tmp unreadable: the extraction reports it.
    }
  }

  /** Whether a process (this JVM included) holds the lock on {@code lockFile}. */
  private static boolean held(Path lockFile) throws IOException {
    if (!Files.exists(lockFile, LinkOption.NOFOLLOW_LINKS)) {
      return false;
    }
    try (FileChannel channel = FileChannel.open(lockFile, StandardOpenOption.WRITE)) {
      final FileLock lock = channel.tryLock();
      if (lock == null) {
        return true;
      }
      lock.release();
      return false;
    } catch (OverlappingFileLockException e) {
      return true; // held by another class loader's extraction in this JVM
    }
  }

  private static void deleteQuietly(Path dir, List<String> names) {
    try {
      for (String name : names) {
        Files.deleteIfExists(dir.resolve(name));
      }
      Files.deleteIfExists(dir.resolve(LOCK)); // still locked: no one takes the folder for left
      Files.deleteIfExists(dir);
    } catch (IOException e) {
      System.err.println("bulkbloom: could not delete " + dir + ": " + e);
    }
  }
}
