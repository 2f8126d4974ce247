#!/bin/sh
# A JVM with only the operator jar, Flink's jars, the tests' classes and JUnit's console launcher
# (which runs them), no -Dbulkbloom.jni.library, a scrubbed environment (no LD_LIBRARY_PATH) and
# the system's libhwy hidden loads the library the jar carries and dedups (JarNativeTest). The system's libhwy cannot be removed (the build
# needs it), so, in a mount namespace of our own (as root, or mapped to root in a user namespace),
# each of its files is covered by /dev/null, which the loader cannot load; the rest of the machine
# sees nothing. Also checks that the JNI library needs no libstdc++ of the system and finds
# Highway next to itself, and prints the highest glibc version each library needs. Exits 77 (skipped) where no private mount namespace is allowed.
#
# Usage: native_from_jar.sh JAVA JAR_TOOL OPERATOR_JAR TESTS_JAR FLINK_LIB_DIR CLI SCRATCH JUNIT_JAR
set -eu
java=$1 jar_tool=$2 operator_jar=$3 tests_jar=$4 flink_lib=$5 cli=$6 scratch=$7 junit=$8

if ! unshare --mount --map-root-user true 2>/dev/null; then
  echo "this machine allows no private mount namespace: skipped" >&2
  exit 77
fi
rm -rf "$scratch"
mkdir -p "$scratch/unpacked" "$scratch/tmp"
hidden=$(ldconfig -p | sed -n 's/.*libhwy.* => //p' | xargs -r realpath | sort -u)
[ -n "$hidden" ] || { echo "ldconfig -p names no libhwy: the build machine's should be there" >&2; exit 1; }

(cd "$scratch/unpacked" && "$jar_tool" xf "$operator_jar" org/bulkbloom/jni)
folder=$(echo "$scratch"/unpacked/org/bulkbloom/jni/linux-*)
jni=$folder/libbulkbloom_jni.so
needed=$(objdump -p "$jni" | sed -n 's/^ *NEEDED *//p')
echo "libbulkbloom_jni.so needs: $(echo $needed)"
case " $(echo $needed) " in
  *libstdc++*) echo "the JNI library needs the system's libstdc++" >&2; exit 1 ;;
esac
for library in "$jni" "$folder"/libhwy.so.1; do
  echo "$(basename "$library") needs $(objdump -T "$library" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
done

classpath=$tests_jar:$operator_jar:$junit
for jar in "$flink_lib"/*.jar; do classpath=$classpath:$jar; done
"$java" -cp "$classpath" org.bulkbloom.flink.tests.JarNativeTest "$cli" "$scratch/run"
# In the namespace: hide each libhwy file, check ldd finds the bundled one, then run the JVM with
# an environment that holds only PATH and HOME.
unshare --mount --map-root-user sh -c '
  set -eu
  jni=$1 java=$2 classpath=$3 scratch=$4; shift 4
  for f in "$@"; do mount --bind /dev/null "$f" && test ! -s "$f" || exit 1; done
  resolved=$(ldd "$jni" | grep libhwy)
  echo "ldd: $resolved"
  case $resolved in
    *"=> $(dirname "$jni")/libhwy.so.1"*) ;;
    *) echo "ldd does not find the bundled libhwy next to the JNI library" >&2; exit 1 ;;
  esac
  exec env -i PATH=/usr/bin:/bin HOME="$scratch" "$java" -Xmx1g -XX:+UseSerialGC \
    --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED \
    -Dbulkbloom.jni.tmpdir="$scratch/tmp" -Dbulkbloom.test.scratch="$scratch/run" -cp "$classpath" \
    org.junit.platform.console.ConsoleLauncher --disable-banner --disable-ansi-colors \
    --details-theme=ascii --fail-if-no-tests --select-class org.bulkbloom.flink.tests.JarNativeTest
' sh "$jni" "$java" "$classpath" "$scratch" $hidden
