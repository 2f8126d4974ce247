// The JNI side of org.bulkbloom.jni.NativeWindowShards: the window shards one Flink subtask owns,
// over bulkbloom's public C++ API. Every call is a bulk call on Java arrays. C++ exceptions become
// Java exceptions carrying the C++ message: std::invalid_argument and FormatError (a damaged
// state image) IllegalArgumentException, std::bad_alloc and AllocationError OutOfMemoryError,
// everything else IllegalStateException.
#include <jni.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bulkbloom/format.hpp"
#include "bulkbloom/incremental.hpp"
#include "bulkbloom/shard.hpp"
#include "bulkbloom/window.hpp"
#include "bulkbloom/window_shard.hpp"
#include "packed_chunk.hpp"

namespace {

using bulkbloom::WindowConfig;
using bulkbloom::WindowShard;
using bulkbloom::WindowSizing;

// A pending Java exception, thrown from C++ code that holds no JNI resources when it unwinds.
struct JavaException {
  const char* type;
  std::string message;
};

void throw_java(JNIEnv* env, const char* type, const std::string& message) {
  if (env->ExceptionCheck()) return;
  if (jclass cls = env->FindClass(type)) env->ThrowNew(cls, message.c_str());
}

// Runs `body`, turning any C++ exception into the matching Java exception. Returns body's value,
// or `fallback` when an exception is now pending.
template <typename Result, typename Body>
Result guarded(JNIEnv* env, Result fallback, Body&& body) {
  try {
    return body();
  } catch (const JavaException& e) {
    throw_java(env, e.type, e.message);
  } catch (const std::invalid_argument& e) {
    throw_java(env, "java/lang/IllegalArgumentException", e.what());
  } catch (const bulkbloom::FormatError& e) {
    throw_java(env, "java/lang/IllegalArgumentException", e.what());
  } catch (const std::bad_alloc&) {
    throw_java(env, "java/lang/OutOfMemoryError", "bulkbloom: native memory exhausted");
  } catch (const bulkbloom::AllocationError& e) {
    throw_java(env, "java/lang/OutOfMemoryError", e.what());
  } catch (const std::exception& e) {
    throw_java(env, "java/lang/IllegalStateException", e.what());
  }
  return fallback;
}

// A Java primitive array pinned for the length of one native call (GetPrimitiveArrayCritical:
// no copy in the usual case). Nothing else may call into the JVM while one is held, so every
// JNI call that can fail happens before or after; so does every GetArrayLength, which is why the
// length comes in (lengths_of), read before the first array of the call is pinned.
template <typename T>
class Pinned {
 public:
  Pinned(JNIEnv* env, jarray array, jsize size, bool written)
      : env_(env), array_(array), written_(written), size_(size) {
    data_ = static_cast<T*>(env->GetPrimitiveArrayCritical(array, nullptr));
    if (data_ == nullptr) throw std::bad_alloc();
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  ~Pinned() { env_->ReleasePrimitiveArrayCritical(array_, data_, written_ ? 0 : JNI_ABORT); }
  T* data() const { return data_; }
  std::size_t size() const { return static_cast<std::size_t>(size_); }

 private:
  JNIEnv* env_;
  jarray array_;
  bool written_;
  jsize size_;
  T* data_ = nullptr;
};

// The lengths of a call's arrays, in order, for the Pinned of each.
template <std::size_t N>
std::array<jsize, N> lengths_of(JNIEnv* env, const jarray (&arrays)[N]) {
  std::array<jsize, N> lengths{};
  for (std::size_t i = 0; i < N; ++i) lengths[i] = env->GetArrayLength(arrays[i]);
  return lengths;
}

WindowConfig window_config(jlong window, jlong lateness, jint generations, jdouble fpr,
                           jlong capacity, jlong seed, jint num_shards, jboolean sized) {
  if (window <= 0) {
    throw std::invalid_argument("window length " + std::to_string(window) +
                                " is out of range: expected at least 1 clock unit");
  }
  if (lateness < 0) {
    throw std::invalid_argument("lateness " + std::to_string(lateness) +
                                " is out of range: expected 0 or more clock units");
  }
  if (capacity <= 0) {
    throw std::invalid_argument("capacity " + std::to_string(capacity) +
                                " is out of range: expected at least 1 record per window length");
  }
  if (generations < 2 || generations > static_cast<jint>(WindowConfig::kMaxGenerations)) {
    throw std::invalid_argument("generations " + std::to_string(generations) +
                                " is out of range: expected 2 to " +
                                std::to_string(WindowConfig::kMaxGenerations));
  }
  // Sized as the command line's `dedup --window T --capacity N` sizes it, so that the same
  // options give the same layout and so the same answers.
  WindowConfig config = WindowConfig::for_event_time(
      static_cast<double>(capacity) / static_cast<double>(window),
      static_cast<std::uint64_t>(window), fpr, static_cast<std::uint32_t>(generations),
      static_cast<std::uint64_t>(lateness));
  config.generation.seed = static_cast<std::uint64_t>(seed);
  // Sized shards: every generation's block count a multiple of S, so that one routing (on the
  // configured layout) serves every size (docs/WINDOW.md "Sizing shards").
  if (sized && num_shards >= 1)
    config = config.shardable_by(static_cast<std::uint32_t>(num_shards));
  return config;
}

// Records within one window length as keys of one generation, as the command line's --capacity
// becomes WindowSizing::min_keys: spread over the window, times a period.
std::uint64_t generation_keys(const WindowConfig& config, jlong records) {
  return static_cast<std::uint64_t>(
      std::ceil(static_cast<double>(records) / static_cast<double>(config.window) *
                static_cast<double>(config.period())));
}

// A shard's own records between two looks at whether its newest generation must grow: a
// sixteenth of its share of the configured generation's keys, so that a look comes before the
// generation is much past half full; at least 16 records.
std::uint64_t growth_check_interval(std::uint64_t min_keys, std::uint32_t num_shards) {
  return std::max<std::uint64_t>(16, min_keys / num_shards / 16);
}

// The window shards of one subtask.
// Sums over shards behind the metrics' stats (Java_..._stats).
struct StatsSums {
  double bytes = 0, blocks = 0, fpr = 0, set_bits = 0, bits = 0;
};

struct ShardSet {
  WindowConfig config;
  std::uint32_t num_shards = 1;
  // Whether the shards size per period (else every generation keeps the configured size).
  bool sized = false;
  // What every held shard that sizes per period is given (set_sizing): the keys of the
  // configured capacity at least, at most the user's bound and what the memory budget holds.
  WindowSizing sizing;
  std::uint64_t user_max_keys = 0;  // 0: no bound
  // Bytes one shard's generation may take, all its filters together (0: no bound).
  std::uint64_t generation_budget = 0;
  std::uint64_t check_interval = 16;
  // Growths refused for want of room, each (shard, period) counted once.
  std::uint64_t capped = 0;
  std::map<std::uint32_t, std::int64_t> capped_period;
  std::map<std::uint32_t, WindowShard> shards;
  // The reading that statsStep calls take a few shards at a time: the first shard the next step
  // reads, and the sums of the shards before it.
  std::uint32_t stats_next = 0;
  StatsSums stats_sums;

  WindowShard& owned(std::uint32_t shard) {
    const auto it = shards.find(shard);
    if (it == shards.end()) {
      throw JavaException{"java/lang/IllegalStateException",
                          "bulkbloom: shard " + std::to_string(shard) + " of " +
                              std::to_string(num_shards) + " is not held by this subtask"};
    }
    return it->second;
  }
};

// Shard sets alive in this process, so that tests can see every task free its native memory.
std::atomic<std::int64_t> live_sets{0};
// Shards the stats readings of this process have read, so that tests can see when an operator
// reads its window.
std::atomic<std::int64_t> stats_shards_read{0};

ShardSet& shard_set(jlong handle) {
  return *reinterpret_cast<ShardSet*>(handle);
}

bulkbloom::Options cpu_options() {
  bulkbloom::Options options;
  options.backend = bulkbloom::Backend::cpu;
  // Flink runs one task per slot; a subtask's bulk calls stay on its own thread.
  options.threads = 1;
  return options;
}

std::uint32_t shard_number(const ShardSet& set, jint shard) {
  if (shard < 0 || static_cast<std::uint32_t>(shard) >= set.num_shards) {
    throw std::invalid_argument("shard " + std::to_string(shard) +
                                " is out of range: expected 0 to " +
                                std::to_string(set.num_shards - 1));
  }
  return static_cast<std::uint32_t>(shard);
}

bool sizes_per_period(const ShardSet& set, const WindowShard& shard) {
  return set.sized && shard.sizes_per_period();
}

void apply_sizing(const ShardSet& set, WindowShard& shard) {
  if (sizes_per_period(set, shard)) shard.set_sizing(set.sizing);
}

// Keys of one shard's generation of at most `bytes` bytes, all its filters together.
std::uint64_t keys_within_bytes(const ShardSet& set, std::uint64_t bytes) {
  const bulkbloom::Layout& layout = set.config.generation;
  const std::uint64_t block_bytes = layout.size_bytes() / layout.num_blocks;
  // A shard holds 1/S of every generation's blocks.
  const std::uint64_t whole_blocks =
      std::min<std::uint64_t>(bytes / block_bytes, bulkbloom::Layout::kMaxBlocks / set.num_shards) *
      set.num_shards;
  return set.config.keys_within(whole_blocks);
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  return a / b - (a % b != 0 && (a < 0) != (b < 0) ? 1 : 0);
}

// No period brings more than this many times the keys it has brought so far (a share of the
// period elapsed below it counts as it): a stream that starts a period with a burst grows in
// steps of at most this, and the look at half full catches the next.
constexpr double kLeastElapsed = 1.0 / 8;
// A generation grows when its period is projected this far past its size, to this much past the
// projection: noise in a steady stream does not make it grow, and one step covers a jump.
constexpr double kGrowthTrigger = 1.25;
constexpr double kGrowthHeadroom = 1.25;
// The filter that takes over a period runs at the rate its sealed filters leave, a little below
// the generation's, and so needs a little more room than the generation's rate gives.
constexpr double kRoomForRate = 0.9;

// Sizing per period sizes a generation from the periods before it; a stream whose keys jump
// within a period (a day bringing 10x the keys of the one before) would overfill it. So when the
// newest generation is half full and its period is projected (its keys so far over the share of
// the period elapsed) past its size, a larger filter takes the rest of the period
// (WindowedFilter::set_sizing seals the full one). Looked at every check_interval of the shard's
// own records, so decisions depend on the records alone, never on how they were batched. Growth
// stops at the user's bound and at the generation budget; a refusal is counted once a period.
void grow_if_due(ShardSet& set, std::uint32_t index, WindowShard& shard) {
  const std::uint64_t capacity = shard.generation_capacity(0);
  // The whole window's keys, as a shard without the others' counts takes them: its own times S.
  const double keys = static_cast<double>(shard.generation_keys(0)) * set.num_shards;
  if (capacity == 0 || 2 * keys < static_cast<double>(capacity)) return;
  const auto period = static_cast<std::int64_t>(set.config.period());
  const std::int64_t clock = shard.clock_time().value_or(0);
  const std::int64_t now = floor_div(clock, period);
  const std::int64_t into = clock - now * period;
  const double elapsed =
      std::max(static_cast<double>(into) / static_cast<double>(period), kLeastElapsed);
  const double projected = keys / elapsed;
  if (projected <= kGrowthTrigger * static_cast<double>(capacity)) return;
  auto target = static_cast<std::uint64_t>(std::min(kGrowthHeadroom * projected, 0x1p62));
  std::uint64_t bound = set.user_max_keys == 0 ? target : set.user_max_keys;
  if (set.generation_budget != 0) {
    const std::uint64_t used = shard.generation_memory(0);
    const std::uint64_t room = used < set.generation_budget ? set.generation_budget - used : 0;
    bound = std::min(bound, keys_within_bytes(set, static_cast<std::uint64_t>(
                                                       kRoomForRate * static_cast<double>(room))));
  }
  if (target > bound) {
    auto [it, first] = set.capped_period.try_emplace(index, now);
    if (first || it->second != now) {
      it->second = now;
      ++set.capped;
    }
    target = bound;
  }
  if (target <= capacity) return;
  shard.set_sizing({target, set.sizing.max_keys});
  shard.set_sizing(set.sizing);
}

// Dedups records i in [0, n) in order, each against its own shard: records of one shard keep
// their order, and shards never interact, so this is each shard's sequential answer.
template <typename Key>
jint dedup(ShardSet& set, std::span<const Key> keys, const jint* shards,
           std::span<const std::int64_t> clocks, jbyte* is_new) {
  const std::size_t n = keys.size();
  for (std::size_t i = 0; i < n; ++i) set.owned(static_cast<std::uint32_t>(shards[i]));
  std::vector<std::uint32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return shards[a] < shards[b]; });
  std::vector<Key> run_keys;
  std::vector<std::int64_t> run_clocks;
  std::vector<std::uint8_t> run_flags;
  jint fresh = 0;
  for (std::size_t begin = 0; begin < n;) {
    const jint shard = shards[order[begin]];
    std::size_t end = begin;
    run_keys.clear();
    run_clocks.clear();
    for (; end < n && shards[order[end]] == shard; ++end) {
      run_keys.push_back(keys[order[end]]);
      run_clocks.push_back(clocks[order[end]]);
    }
    run_flags.resize(run_keys.size());
    const auto index = static_cast<std::uint32_t>(shard);
    WindowShard& target = set.owned(index);
    const bool sized = sizes_per_period(set, target);
    for (std::size_t at = 0; at < run_keys.size();) {
      // Pieces end where the shard's own record count reaches a multiple of the check interval.
      std::size_t length = run_keys.size() - at;
      if (sized) {
        const std::uint64_t due = set.check_interval - target.records_seen() % set.check_interval;
        length = static_cast<std::size_t>(std::min<std::uint64_t>(length, due));
      }
      fresh += static_cast<jint>(
          target.insert_if_absent(std::span<const Key>(run_keys).subspan(at, length),
                                  std::span<const std::int64_t>(run_clocks).subspan(at, length),
                                  std::span<std::uint8_t>(run_flags).subspan(at, length)));
      if (sized && target.records_seen() % set.check_interval == 0) grow_if_due(set, index, target);
      at += length;
    }
    for (std::size_t j = begin; j < end; ++j)
      is_new[order[j]] = static_cast<jbyte>(run_flags[j - begin]);
    begin = end;
  }
  return fresh;
}

void check_batch(std::size_t n, std::size_t shards, std::size_t clocks, std::size_t is_new) {
  if (shards < n || clocks < n || is_new < n) {
    throw std::invalid_argument("bulkbloom: a batch of " + std::to_string(n) +
                                " records needs shard, clock and flag arrays that long");
  }
}

// Throws naming `source` unless `loaded` is shard `index` of the set's window.
void check_same_window(const ShardSet& set, const WindowShard& loaded, std::uint32_t index,
                       const std::string& source) {
  const WindowConfig& got = loaded.config();
  if (got.block_multiple != set.config.block_multiple) {
    // Made with and without sizing per period, the same options round the layout to different
    // block multiples and so route keys differently: the state needs its own.
    throw std::invalid_argument(
        source + " holds " +
        (set.sized ? "fixed-size shards (" + got.describe() +
                         "), as operators before sizing per period wrote them, but this "
                         "operator sizes its shards per period (" +
                         set.config.describe() +
                         "): restore it with BloomDedup.fixedSizeShards(), which keeps the "
                         "state's layout and routing"
                   : "shards sized per period (" + got.describe() +
                         "), but this operator keeps fixed-size shards (" + set.config.describe() +
                         "): restore it without fixedSizeShards()"));
  }
  if (got.clock != set.config.clock || got.window != set.config.window ||
      got.generations != set.config.generations || got.lateness != set.config.lateness ||
      got.generation != set.config.generation || loaded.num_shards() != set.num_shards ||
      loaded.index() != index) {
    throw std::invalid_argument(source + " holds shard " + std::to_string(loaded.index()) + " of " +
                                std::to_string(loaded.num_shards()) + " of " + got.describe() +
                                ", but this operator runs shard " + std::to_string(index) + " of " +
                                std::to_string(set.num_shards) + " of " + set.config.describe() +
                                ": restore with the configuration the state was made with");
  }
}

// Holds `shard`, restored from state (a file image or a snapshot's parts), as shard `index` of
// `set`: the same window as the operator's, under the operator's sizing. Every restore path
// goes through here, so none can skip a step.
void hold_restored(ShardSet& set, std::uint32_t index, WindowShard shard,
                   const std::string& source) {
  check_same_window(set, shard, index, source);
  apply_sizing(set, shard);
  set.shards.insert_or_assign(index, std::move(shard));
}

std::size_t chunk_size(jint chunk_bytes) {
  if (chunk_bytes <= 0 || chunk_bytes % 8 != 0) {
    throw std::invalid_argument("bulkbloom: chunk size " + std::to_string(chunk_bytes) +
                                " is not a positive multiple of 8 bytes");
  }
  return static_cast<std::size_t>(chunk_bytes);
}

std::vector<std::byte> copy_of(JNIEnv* env, jbyteArray array) {
  std::vector<std::byte> bytes(static_cast<std::size_t>(env->GetArrayLength(array)));
  env->GetByteArrayRegion(array, 0, static_cast<jsize>(bytes.size()),
                          reinterpret_cast<jbyte*>(bytes.data()));
  return bytes;
}

jbyteArray new_byte_array(JNIEnv* env, std::span<const std::byte> bytes) {
  jbyteArray out = env->NewByteArray(static_cast<jsize>(bytes.size()));
  if (out == nullptr) throw JavaException{"java/lang/OutOfMemoryError", "bulkbloom: Java heap"};
  env->SetByteArrayRegion(out, 0, static_cast<jsize>(bytes.size()),
                          reinterpret_cast<const jbyte*>(bytes.data()));
  return out;
}

void check_routing_layout(const bulkbloom::Layout& layout, jint num_shards) {
  if (num_shards < 1 || static_cast<std::uint64_t>(num_shards) > layout.num_blocks) {
    throw std::invalid_argument(
        "shard count " + std::to_string(num_shards) + " is out of range: expected 1 to " +
        std::to_string(layout.num_blocks) + " (the blocks of " + layout.describe() + ")");
  }
}

// A log as little-endian hashes in Java arrays of at most `chunk` bytes; null (a Java exception
// pending) when out of memory.
jobjectArray log_chunks(JNIEnv* env, std::span<const std::uint64_t> hashes, std::size_t chunk) {
  const std::span<const std::byte> log = std::as_bytes(hashes);
  const jclass byte_array = env->FindClass("[B");
  if (byte_array == nullptr) return nullptr;
  const std::size_t count = (log.size() + chunk - 1) / chunk;
  const jobjectArray chunks = env->NewObjectArray(static_cast<jsize>(count), byte_array, nullptr);
  // One call takes a log for each closed part: without this, each left a local reference behind.
  env->DeleteLocalRef(byte_array);
  if (chunks == nullptr) return nullptr;
  for (std::size_t i = 0; i < count; ++i) {
    const jbyteArray piece =
        new_byte_array(env, log.subspan(i * chunk, std::min(chunk, log.size() - i * chunk)));
    if (piece == nullptr) return nullptr;
    env->SetObjectArrayElement(chunks, static_cast<jsize>(i), piece);
    env->DeleteLocalRef(piece);
  }
  return chunks;
}

jlongArray new_long_array(JNIEnv* env, const std::vector<jlong>& values) {
  const jlongArray array = env->NewLongArray(static_cast<jsize>(values.size()));
  if (array != nullptr) {
    env->SetLongArrayRegion(array, 0, static_cast<jsize>(values.size()), values.data());
  }
  return array;
}

}  // namespace

extern "C" {

JNIEXPORT jstring JNICALL Java_org_bulkbloom_jni_NativeWindowShards_sizeWindow(
    JNIEnv* env, jclass, jlong window, jlong lateness, jint generations, jdouble fpr,
    jlong capacity, jlong seed, jint num_shards, jboolean sized, jlongArray layout_out) {
  return guarded<jstring>(env, nullptr, [&]() -> jstring {
    const WindowConfig config =
        window_config(window, lateness, generations, fpr, capacity, seed, num_shards, sized);
    const jlong layout[] = {static_cast<jlong>(config.generation.num_blocks),
                            static_cast<jlong>(config.generation.index),
                            static_cast<jlong>(config.memory_bytes()),
                            static_cast<jlong>(config.period())};
    if (env->GetArrayLength(layout_out) < 4) {
      throw std::invalid_argument("bulkbloom: sizeWindow needs a layout array of 4");
    }
    env->SetLongArrayRegion(layout_out, 0, 4, layout);
    return env->NewStringUTF(config.describe().c_str());
  });
}

JNIEXPORT jlong JNICALL Java_org_bulkbloom_jni_NativeWindowShards_create(
    JNIEnv* env, jclass, jlong window, jlong lateness, jint generations, jdouble fpr,
    jlong capacity, jlong seed, jint num_shards, jboolean sized, jlong max_capacity) {
  return guarded<jlong>(env, 0, [&] {
    const WindowConfig config =
        window_config(window, lateness, generations, fpr, capacity, seed, num_shards, sized);
    check_routing_layout(config.generation, num_shards);
    auto* set = new ShardSet{};
    set->config = config;
    set->num_shards = static_cast<std::uint32_t>(num_shards);
    set->sized = sized == JNI_TRUE;
    set->sizing.min_keys = generation_keys(config, capacity);
    if (max_capacity > 0) {
      set->user_max_keys = std::max(set->sizing.min_keys, generation_keys(config, max_capacity));
    }
    set->sizing.max_keys = set->user_max_keys;
    set->check_interval = growth_check_interval(set->sizing.min_keys, set->num_shards);
    ++live_sets;
    return reinterpret_cast<jlong>(set);
  });
}

JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_free(JNIEnv*, jclass,
                                                                      jlong handle) {
  delete reinterpret_cast<ShardSet*>(handle);
  --live_sets;
}

JNIEXPORT jlong JNICALL Java_org_bulkbloom_jni_NativeWindowShards_liveSets(JNIEnv*, jclass) {
  return live_sets.load();
}

JNIEXPORT jlong JNICALL Java_org_bulkbloom_jni_NativeWindowShards_statsShardsRead(JNIEnv*, jclass) {
  return stats_shards_read.load();
}

JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_addEmpty(JNIEnv* env, jclass,
                                                                          jlong handle,
                                                                          jint shard) {
  guarded<int>(env, 0, [&] {
    ShardSet& set = shard_set(handle);
    const std::uint32_t index = shard_number(set, shard);
    WindowShard shard(set.config, index, set.num_shards, cpu_options());
    apply_sizing(set, shard);
    set.shards.insert_or_assign(index, std::move(shard));
    return 0;
  });
}

JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_load(JNIEnv* env, jclass,
                                                                      jlong handle, jint shard,
                                                                      jbyteArray bytes) {
  guarded<int>(env, 0, [&] {
    ShardSet& set = shard_set(handle);
    const std::uint32_t index = shard_number(set, shard);
    const std::vector<std::byte> image = copy_of(env, bytes);
    const std::string source = "the checkpointed state of shard " + std::to_string(index);
    hold_restored(set, index, bulkbloom::load_window_shard(image, nullptr, cpu_options(), source),
                  source);
    return 0;
  });
}

JNIEXPORT jbyteArray JNICALL Java_org_bulkbloom_jni_NativeWindowShards_bytes(JNIEnv* env, jclass,
                                                                             jlong handle,
                                                                             jint shard) {
  return guarded<jbyteArray>(env, nullptr, [&]() -> jbyteArray {
    ShardSet& set = shard_set(handle);
    const std::vector<std::byte> image =
        bulkbloom::to_file_bytes(set.owned(shard_number(set, shard)));
    if (image.size() > 0x7fffffffu) {
      throw std::invalid_argument("bulkbloom: shard " + std::to_string(shard) + " is " +
                                  std::to_string(image.size()) +
                                  " bytes, more than a Java array holds: use more shards");
    }
    jbyteArray out = env->NewByteArray(static_cast<jsize>(image.size()));
    if (out == nullptr) return nullptr;
    env->SetByteArrayRegion(out, 0, static_cast<jsize>(image.size()),
                            reinterpret_cast<const jbyte*>(image.data()));
    return out;
  });
}

JNIEXPORT jint JNICALL Java_org_bulkbloom_jni_NativeWindowShards_dedupLongs(
    JNIEnv* env, jclass, jlong handle, jlongArray keys, jintArray shards, jlongArray clocks, jint n,
    jbyteArray is_new) {
  return guarded<jint>(env, -1, [&] {
    const auto length = lengths_of(env, {keys, shards, clocks, is_new});
    const Pinned<std::uint64_t> k(env, keys, length[0], false);
    const Pinned<jint> s(env, shards, length[1], false);
    const Pinned<std::int64_t> c(env, clocks, length[2], false);
    const Pinned<jbyte> out(env, is_new, length[3], true);
    const auto count = static_cast<std::size_t>(n);
    if (n < 0 || k.size() < count) throw std::invalid_argument("bulkbloom: bad batch length");
    check_batch(count, s.size(), c.size(), out.size());
    return dedup<std::uint64_t>(shard_set(handle), {k.data(), count}, s.data(), {c.data(), count},
                                out.data());
  });
}

JNIEXPORT jint JNICALL Java_org_bulkbloom_jni_NativeWindowShards_dedupBytes(
    JNIEnv* env, jclass, jlong handle, jbyteArray blob, jintArray ends, jintArray shards,
    jlongArray clocks, jint n, jbyteArray is_new) {
  return guarded<jint>(env, -1, [&] {
    const auto length = lengths_of(env, {blob, ends, shards, clocks, is_new});
    const Pinned<char> b(env, blob, length[0], false);
    const Pinned<jint> e(env, ends, length[1], false);
    const Pinned<jint> s(env, shards, length[2], false);
    const Pinned<std::int64_t> c(env, clocks, length[3], false);
    const Pinned<jbyte> out(env, is_new, length[4], true);
    const auto count = static_cast<std::size_t>(n);
    if (n < 0 || e.size() < count) throw std::invalid_argument("bulkbloom: bad batch length");
    check_batch(count, s.size(), c.size(), out.size());
    std::vector<std::string_view> views(count);
    jint begin = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const jint end = e.data()[i];
      if (end < begin || static_cast<std::size_t>(end) > b.size()) {
        throw std::invalid_argument("bulkbloom: key " + std::to_string(i) +
                                    " ends outside its batch");
      }
      views[i] = std::string_view(b.data() + begin, static_cast<std::size_t>(end - begin));
      begin = end;
    }
    return dedup<std::string_view>(shard_set(handle), views, s.data(), {c.data(), count},
                                   out.data());
  });
}

JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_advanceTo(JNIEnv* env, jclass,
                                                                           jlong handle,
                                                                           jlong clock) {
  guarded<int>(env, 0, [&] {
    for (auto& [index, shard] : shard_set(handle).shards) shard.advance_to(clock);
    return 0;
  });
}

JNIEXPORT jlong JNICALL Java_org_bulkbloom_jni_NativeWindowShards_clock(JNIEnv* env, jclass,
                                                                        jlong handle) {
  return guarded<jlong>(env, 0, [&] {
    jlong clock = std::numeric_limits<jlong>::min();
    for (const auto& [index, shard] : shard_set(handle).shards) {
      if (const auto time = shard.clock_time()) clock = std::max<jlong>(clock, *time);
    }
    return clock;
  });
}

// Adds `shard` to `sums`; returns the bytes read.
std::uint64_t add_stats(const ShardSet& set, const WindowShard& shard, StatsSums& sums) {
  ++stats_shards_read;
  const auto n = static_cast<double>(shard.blocks().size());
  sums.bytes += static_cast<double>(shard.memory_bytes());
  sums.blocks += n;
  sums.fpr += n * shard.current_fpr();
  for (std::uint32_t age = 0; age < set.config.generations; ++age) {
    const bulkbloom::Filter& generation = shard.generation(age);
    sums.set_bits += static_cast<double>(generation.popcount());
    sums.bits += 8.0 * static_cast<double>(generation.layout().size_bytes());
  }
  return shard.memory_bytes();
}

// {bytes of all held shards, blocks held, block-weighted current FPR, block-weighted fraction of
// set bits}: a random absent key falls into a shard in proportion to its blocks.
void write_stats(JNIEnv* env, const StatsSums& sums, jdoubleArray out) {
  const double stats[] = {sums.bytes, sums.blocks, sums.blocks > 0 ? sums.fpr / sums.blocks : 0.0,
                          sums.bits > 0 ? sums.set_bits / sums.bits : 0.0};
  env->SetDoubleArrayRegion(out, 0, 4, stats);
}

JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_stats(JNIEnv* env, jclass,
                                                                       jlong handle,
                                                                       jdoubleArray out) {
  guarded<int>(env, 0, [&] {
    const ShardSet& set = shard_set(handle);
    StatsSums sums;
    for (const auto& [index, shard] : set.shards) add_stats(set, shard, sums);
    write_stats(env, sums, out);
    return 0;
  });
}

// The same sums, taken in steps of whole shards that read at least `bytes` (one shard at least)
// and resume where the last step stopped, so that no call reads the whole window. Each shard is
// read at one instant, the whole at the instants of its steps. When a step reaches the last held
// shard it writes the stats to `out`, starts the next reading over and returns true.
JNIEXPORT jboolean JNICALL Java_org_bulkbloom_jni_NativeWindowShards_statsStep(JNIEnv* env, jclass,
                                                                               jlong handle,
                                                                               jlong bytes,
                                                                               jdoubleArray out) {
  return guarded<jboolean>(env, JNI_FALSE, [&]() -> jboolean {
    ShardSet& set = shard_set(handle);
    std::uint64_t read = 0;
    auto it = set.shards.lower_bound(set.stats_next);
    for (; it != set.shards.end() && (read == 0 || read < static_cast<std::uint64_t>(bytes));
         ++it) {
      read += add_stats(set, it->second, set.stats_sums);
    }
    if (it != set.shards.end()) {
      set.stats_next = it->first;
      return JNI_FALSE;
    }
    write_stats(env, set.stats_sums, out);
    set.stats_sums = {};
    set.stats_next = 0;
    return JNI_TRUE;
  });
}

JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_generationBudget(JNIEnv* env,
                                                                                  jclass,
                                                                                  jlong handle,
                                                                                  jlong bytes) {
  guarded<int>(env, 0, [&] {
    ShardSet& set = shard_set(handle);
    if (!set.sized) return 0;
    std::uint64_t max_keys = set.user_max_keys;
    if (bytes > 0) {
      const std::uint64_t fits = keys_within_bytes(set, static_cast<std::uint64_t>(bytes));
      if (fits < set.sizing.min_keys) {
        throw std::invalid_argument(
            "bulkbloom: a generation of one shard may take " + std::to_string(bytes) +
            " bytes, which holds " + std::to_string(fits) + " keys of the whole window, fewer " +
            "than the " + std::to_string(set.sizing.min_keys) + " the capacity gives each");
      }
      max_keys = max_keys == 0 ? fits : std::min(max_keys, fits);
    }
    set.generation_budget = bytes > 0 ? static_cast<std::uint64_t>(bytes) : 0;
    set.sizing.max_keys = max_keys;
    for (auto& [index, shard] : set.shards) apply_sizing(set, shard);
    return 0;
  });
}

// {bytes of the held shards, their generations found over their size, growths refused for want
// of room}: what the operator reserves and reports, without reading a bit.
JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_sizingStats(JNIEnv* env, jclass,
                                                                             jlong handle,
                                                                             jlongArray out) {
  guarded<int>(env, 0, [&] {
    const ShardSet& set = shard_set(handle);
    std::uint64_t bytes = 0, overfull = 0;
    for (const auto& [index, shard] : set.shards) {
      bytes += shard.memory_bytes();
      overfull += shard.overfull_generations();
    }
    const jlong stats[] = {static_cast<jlong>(bytes), static_cast<jlong>(overfull),
                           static_cast<jlong>(set.capped)};
    env->SetLongArrayRegion(out, 0, 3, stats);
    return 0;
  });
}

JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_shardOfLongs(JNIEnv* env, jclass,
                                                                              jlong handle,
                                                                              jlongArray keys,
                                                                              jintArray out) {
  guarded<int>(env, 0, [&] {
    const ShardSet& set = shard_set(handle);
    std::vector<std::uint64_t> k(static_cast<std::size_t>(env->GetArrayLength(keys)));
    env->GetLongArrayRegion(keys, 0, static_cast<jsize>(k.size()),
                            reinterpret_cast<jlong*>(k.data()));
    std::vector<std::uint32_t> shards(k.size());
    bulkbloom::shard_of(set.config.generation, k, set.num_shards, shards);
    env->SetIntArrayRegion(out, 0, static_cast<jsize>(shards.size()),
                           reinterpret_cast<const jint*>(shards.data()));
    return 0;
  });
}

JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_shardOfBytes(JNIEnv* env, jclass,
                                                                              jlong handle,
                                                                              jobjectArray keys,
                                                                              jintArray out) {
  guarded<int>(env, 0, [&] {
    const ShardSet& set = shard_set(handle);
    const jsize n = env->GetArrayLength(keys);
    std::vector<std::string> owned(static_cast<std::size_t>(n));
    for (jsize i = 0; i < n; ++i) {
      auto key = static_cast<jbyteArray>(env->GetObjectArrayElement(keys, i));
      owned[i].resize(static_cast<std::size_t>(env->GetArrayLength(key)));
      env->GetByteArrayRegion(key, 0, static_cast<jsize>(owned[i].size()),
                              reinterpret_cast<jbyte*>(owned[i].data()));
      env->DeleteLocalRef(key);
    }
    const std::vector<std::string_view> views(owned.begin(), owned.end());
    std::vector<std::uint32_t> shards(views.size());
    bulkbloom::shard_of(set.config.generation, views, set.num_shards, shards);
    env->SetIntArrayRegion(out, 0, n, reinterpret_cast<const jint*>(shards.data()));
    return 0;
  });
}

// Incremental state (bulkbloom/incremental.hpp), for the operator's keyed state: a held shard
// taken apart into metadata and parts, each part's bits copied out in chunks, and put together
// again from chunks Java supplies.

JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_enableChangeLog(JNIEnv* env,
                                                                                 jclass,
                                                                                 jlong handle,
                                                                                 jint shard) {
  guarded<int>(env, 0, [&] {
    ShardSet& set = shard_set(handle);
    bulkbloom::enable_change_log(set.owned(shard_number(set, shard)));
    return 0;
  });
}

// A NativeWindowShards.Snapshot: the metadata, {period, part, blocks, bytes, before_clock (0 or
// 1)} of each part, the
// OpenChange, the log as little-endian hashes in arrays of at most `chunk_bytes` (null when it is
// rewritten or longer than `max_log_bytes`: the caller writes the open part whole then), and the
// closed parts: {period, part, blocks, OpenChange} of each and its final log (null: rewritten).
JNIEXPORT jobject JNICALL Java_org_bulkbloom_jni_NativeWindowShards_takeSnapshot(
    JNIEnv* env, jclass, jlong handle, jint shard, jlong max_log_bytes, jint chunk_bytes) {
  return guarded<jobject>(env, nullptr, [&]() -> jobject {
    ShardSet& set = shard_set(handle);
    const std::size_t chunk = chunk_size(chunk_bytes);
    WindowShard& held = set.owned(shard_number(set, shard));
    const bulkbloom::StateSnapshot snapshot = bulkbloom::take_snapshot(held);
    std::vector<jlong> parts;
    for (std::size_t i = 0; i < snapshot.parts.size(); ++i) {
      const bulkbloom::PartId& id = snapshot.parts[i];
      std::size_t bytes = 0;
      bulkbloom::with_part_bits(held, i,
                                [&](std::span<const std::byte> bits) { bytes = bits.size(); });
      parts.insert(parts.end(), {static_cast<jlong>(id.period), static_cast<jlong>(id.part),
                                 static_cast<jlong>(id.num_blocks), static_cast<jlong>(bytes),
                                 static_cast<jlong>(id.before_clock ? 1 : 0)});
    }
    jobjectArray open_log = nullptr;
    if (snapshot.change != bulkbloom::OpenChange::rewritten &&
        snapshot.log.size() * sizeof(std::uint64_t) <=
            static_cast<std::uint64_t>(std::max<jlong>(max_log_bytes, 0))) {
      open_log = log_chunks(env, snapshot.log, chunk);
      if (open_log == nullptr) return nullptr;
    }
    const jclass chunks_array = env->FindClass("[[B");
    if (chunks_array == nullptr) return nullptr;
    const jobjectArray closed_logs =
        env->NewObjectArray(static_cast<jsize>(snapshot.closed.size()), chunks_array, nullptr);
    if (closed_logs == nullptr) return nullptr;
    std::vector<jlong> closed;
    for (std::size_t i = 0; i < snapshot.closed.size(); ++i) {
      const bulkbloom::ClosedPart& part = snapshot.closed[i];
      closed.insert(closed.end(),
                    {static_cast<jlong>(part.id.period), static_cast<jlong>(part.id.part),
                     static_cast<jlong>(part.id.num_blocks), static_cast<jlong>(part.change)});
      if (part.change == bulkbloom::OpenChange::rewritten) continue;
      const jobjectArray log = log_chunks(env, part.log, chunk);
      if (log == nullptr) return nullptr;
      env->SetObjectArrayElement(closed_logs, static_cast<jsize>(i), log);
      env->DeleteLocalRef(log);
    }
    const jbyteArray metadata = new_byte_array(env, snapshot.metadata);
    const jlongArray part_array = new_long_array(env, parts);
    const jlongArray closed_array = new_long_array(env, closed);
    if (metadata == nullptr || part_array == nullptr || closed_array == nullptr) return nullptr;
    const jclass type = env->FindClass("org/bulkbloom/jni/NativeWindowShards$Snapshot");
    if (type == nullptr) return nullptr;
    const jmethodID make = env->GetMethodID(type, "<init>", "([B[JI[[B[J[[[B)V");
    if (make == nullptr) return nullptr;
    return env->NewObject(type, make, metadata, part_array, static_cast<jint>(snapshot.change),
                          open_log, closed_array, closed_logs);
  });
}

// Copies bytes [offset, offset + out.length) of part `index` of held shard `shard` into `out`;
// returns whether any of them is non-zero.
JNIEXPORT jboolean JNICALL Java_org_bulkbloom_jni_NativeWindowShards_copyPart(
    JNIEnv* env, jclass, jlong handle, jint shard, jint index, jlong offset, jbyteArray out) {
  return guarded<jboolean>(env, JNI_FALSE, [&]() -> jboolean {
    ShardSet& set = shard_set(handle);
    const WindowShard& held = set.owned(shard_number(set, shard));
    const auto length = static_cast<std::size_t>(env->GetArrayLength(out));
    bool non_zero = false;
    bulkbloom::with_part_bits(
        held, static_cast<std::size_t>(index), [&](std::span<const std::byte> bits) {
          if (offset < 0 || static_cast<std::uint64_t>(offset) > bits.size() ||
              length > bits.size() - static_cast<std::size_t>(offset)) {
            throw std::invalid_argument("bulkbloom: bytes " + std::to_string(offset) + " + " +
                                        std::to_string(length) + " are outside part " +
                                        std::to_string(index) + " of " +
                                        std::to_string(bits.size()) + " bytes");
          }
          const auto piece = bits.subspan(static_cast<std::size_t>(offset), length);
          non_zero = std::any_of(piece.begin(), piece.end(),
                                 [](std::byte b) { return b != std::byte{0}; });
          env->SetByteArrayRegion(out, 0, static_cast<jsize>(length),
                                  reinterpret_cast<const jbyte*>(piece.data()));
        });
    return non_zero ? JNI_TRUE : JNI_FALSE;
  });
}

// Bytes [offset, offset + length) of part `index` of held shard `shard` as keyed state stores them
// (packed_chunk.hpp): null when all zero, the packed form when shorter than the bits, else the
// bits.
JNIEXPORT jbyteArray JNICALL Java_org_bulkbloom_jni_NativeWindowShards_storedChunk(
    JNIEnv* env, jclass, jlong handle, jint shard, jint index, jlong offset, jint length) {
  return guarded<jbyteArray>(env, nullptr, [&]() -> jbyteArray {
    ShardSet& set = shard_set(handle);
    const WindowShard& held = set.owned(shard_number(set, shard));
    jbyteArray out = nullptr;
    bulkbloom::with_part_bits(
        held, static_cast<std::size_t>(index), [&](std::span<const std::byte> bits) {
          if (offset < 0 || length < 0 || static_cast<std::uint64_t>(offset) > bits.size() ||
              static_cast<std::size_t>(length) > bits.size() - static_cast<std::size_t>(offset)) {
            throw std::invalid_argument("bulkbloom: bytes " + std::to_string(offset) + " + " +
                                        std::to_string(length) + " are outside part " +
                                        std::to_string(index) + " of " +
                                        std::to_string(bits.size()) + " bytes");
          }
          const auto piece =
              bits.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(length));
          if (std::all_of(piece.begin(), piece.end(),
                          [](std::byte b) { return b == std::byte{0}; })) {
            return;
          }
          const std::vector<std::uint8_t> packed = bulkbloom_jni::pack_chunk(piece);
          out = packed.empty() ? new_byte_array(env, piece)
                               : new_byte_array(env, std::as_bytes(std::span(packed)));
        });
    return out;
  });
}

// Whether the parts `metadata` (a Snapshot's) describes were taken before the shard's clock
// started (PartId::before_clock, the same for all of them): for manifests stored before the
// Snapshot said so.
JNIEXPORT jboolean JNICALL Java_org_bulkbloom_jni_NativeWindowShards_metadataBeforeClock(
    JNIEnv* env, jclass, jbyteArray metadata) {
  return guarded<jboolean>(env, JNI_FALSE, [&] {
    const std::vector<bulkbloom::PartId> parts =
        bulkbloom::snapshot_parts(copy_of(env, metadata), "a shard's snapshot metadata");
    return !parts.empty() && parts.front().before_clock ? JNI_TRUE : JNI_FALSE;
  });
}

// Holds shard `shard` as `metadata` (a Snapshot's) describes it, each part's bits from
// `source.chunk(index, period, part, blocks, offset, length)` in pieces of `chunk_bytes` (null:
// zero bits; `length` bytes: the bits; fewer: packed, as storedChunk gives them). The shard held
// before stays when anything fails.
JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_restore(JNIEnv* env, jclass,
                                                                         jlong handle, jint shard,
                                                                         jbyteArray metadata,
                                                                         jobject source,
                                                                         jint chunk_bytes) {
  guarded<int>(env, 0, [&] {
    ShardSet& set = shard_set(handle);
    const std::uint32_t index = shard_number(set, shard);
    const std::size_t chunk = chunk_size(chunk_bytes);
    const std::vector<std::byte> meta = copy_of(env, metadata);
    const jmethodID chunk_of = env->GetMethodID(env->GetObjectClass(source), "chunk", "(IJIJJI)[B");
    if (chunk_of == nullptr) throw JavaException{"java/lang/IllegalStateException", ""};
    const std::string what = "the keyed state of shard " + std::to_string(index);
    const auto fill = [&](std::size_t part, const bulkbloom::PartId& id,
                          std::span<std::byte> bits) {
      for (std::size_t at = 0; at < bits.size(); at += chunk) {
        const std::size_t length = std::min(chunk, bits.size() - at);
        const auto piece = static_cast<jbyteArray>(env->CallObjectMethod(
            source, chunk_of, static_cast<jint>(part), static_cast<jlong>(id.period),
            static_cast<jint>(id.part), static_cast<jlong>(id.num_blocks), static_cast<jlong>(at),
            static_cast<jint>(length)));
        if (env->ExceptionCheck()) throw JavaException{"java/lang/IllegalStateException", ""};
        // The bits are all zero (PartFill): a chunk not stored leaves them so.
        if (piece == nullptr) continue;
        const auto got = static_cast<std::size_t>(env->GetArrayLength(piece));
        if (got > length) {
          throw bulkbloom::FormatError(
              what + ": part " + id.name() + " has " + std::to_string(got) + " bytes at offset " +
              std::to_string(at) + ", expected at most " + std::to_string(length));
        }
        if (got == length) {
          env->GetByteArrayRegion(piece, 0, static_cast<jsize>(length),
                                  reinterpret_cast<jbyte*>(bits.data() + at));
        } else {
          // Shorter than the bits: packed, unpacked straight from the Java array.
          const Pinned<std::uint8_t> packed(env, piece, static_cast<jsize>(got), false);
          try {
            bulkbloom_jni::unpack_chunk(std::span(packed.data(), packed.size()),
                                        bits.subspan(at, length));
          } catch (const std::invalid_argument& e) {
            throw bulkbloom::FormatError(what + ": part " + id.name() + " at offset " +
                                         std::to_string(at) + ": " + e.what());
          }
        }
        env->DeleteLocalRef(piece);
      }
    };
    hold_restored(set, index,
                  bulkbloom::restore_window_shard(meta, fill, nullptr, cpu_options(), what), what);
    return 0;
  });
}

// Sets the bits of `log` (little-endian hashes, as takeSnapshot gave them) in part `index` of
// held shard `shard` (in the order of its snapshot's parts), or in its open part when `index` is
// negative.
JNIEXPORT void JNICALL Java_org_bulkbloom_jni_NativeWindowShards_replay(JNIEnv* env, jclass,
                                                                        jlong handle, jint shard,
                                                                        jint index,
                                                                        jbyteArray log) {
  guarded<int>(env, 0, [&] {
    ShardSet& set = shard_set(handle);
    WindowShard& held = set.owned(shard_number(set, shard));
    const auto bytes = static_cast<std::size_t>(env->GetArrayLength(log));
    if (bytes % 8 != 0) {
      throw std::invalid_argument("bulkbloom: a log of " + std::to_string(bytes) +
                                  " bytes for shard " + std::to_string(shard) +
                                  " is not a whole number of 8-byte hashes");
    }
    std::vector<std::uint64_t> hashes(bytes / 8);
    env->GetByteArrayRegion(log, 0, static_cast<jsize>(bytes),
                            reinterpret_cast<jbyte*>(hashes.data()));
    if (index < 0) {
      bulkbloom::replay_log(held, hashes);
    } else {
      bulkbloom::replay_log(held, static_cast<std::size_t>(index), hashes);
    }
    return 0;
  });
}

}  // extern "C"
