// What the filter and window bindings share: array types, option parsing, byte-string keys and
// the chunked, GIL-free loop every bulk call runs in.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/variant.h>

#include <bulkbloom/filter.hpp>
#include <bulkbloom/format.hpp>
#include <bulkbloom/incremental.hpp>
#include <bulkbloom/layout.hpp>
#include <bulkbloom/window.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace bulkbloom::python {

namespace nb = nanobind;

/// A 1-D contiguous host array of 64-bit keys (the Python layer views int64 keys as uint64).
using KeyArray = nb::ndarray<const std::uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
/// A 1-D contiguous host array of event times.
using TimeArray = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
/// A 1-D contiguous host byte buffer: byte-string data, or a serialised filter.
using ByteArray = nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
/// A 1-D contiguous host array of 32- or 64-bit Arrow offsets (dtype checked at run time).
using OffsetArray = nb::ndarray<nb::ro, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
/// Where a bulk call writes its 0/1 answers (a numpy bool array viewed as uint8).
using FlagArray = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

/// Keys per chunk of a bulk call: the GIL is released for a chunk and KeyboardInterrupt is checked
/// between chunks, so an interrupted call leaves every finished chunk applied and no chunk half
/// done. Large enough that the library still splits a chunk across its threads.
inline constexpr std::size_t kChunkKeys = std::size_t{1} << 20;

/// Options from the Python keywords: backend "auto" / "cpu" / "cuda", implementation, threads.
Options make_options(const std::string& backend, const std::string& implementation,
                     unsigned threads);

/// MapOptions from the Python keywords of a map() call: mapped files live on the CPU backend.
MapOptions make_map_options(bool verify, const std::string& implementation, unsigned threads);

/// A layout from the Python keywords; throws std::invalid_argument for a bad shape or hash name.
Layout make_layout(const std::string& shape, std::uint64_t num_blocks, const std::string& hash,
                   std::uint64_t seed, const std::string& index);

/// The layout as a dict (shape, num_blocks, hash, seed, index, size_bytes, description).
nb::dict layout_dict(const Layout& layout);

/// The caller's bytes saved with a filter or window file.
FileState file_state(std::uint64_t keys_inserted, const nb::bytes& metadata);

/// Copies the caller's metadata bytes into a Python bytes object.
nb::bytes to_bytes(std::span<const std::byte> bytes);

/// Raises ValueError unless `out` has `count` elements.
void require_length(const FlagArray& out, std::size_t count, const char* what);

/// Byte-string keys of an Arrow array laid out otherwise than as offsets + data, read in place
/// (bulkbloom._core.ArrowByteKeys, from ArrowChunk.byte_keys()): fixed-size binary (`width`
/// bytes a key, one after another) or string/binary views (16 bytes a key: its int32 length,
/// then the key itself if it is at most 12 bytes long, else a 4-byte prefix, the int32 index of
/// the data buffer that holds it and its int32 offset there).
class ArrowByteKeys {
 public:
  /// `count` keys of `width` (> 0) bytes each at `values`.
  static ArrowByteKeys fixed(const std::uint8_t* values, std::size_t count, std::size_t width);
  /// `count` views at `views` into the data buffers `buffers`, of `sizes` bytes.
  static ArrowByteKeys views(const std::uint8_t* views, std::size_t count,
                             std::vector<const char*> buffers, std::vector<std::int64_t> sizes);

  /// Number of keys.
  std::size_t size() const { return count_; }
  /// Raises ValueError naming the first view whose key is not inside its data buffer, so that
  /// key() reads nothing else. Call without the GIL.
  void validate() const {
    if (width_ != 0 || views_inside()) return;
    for (std::size_t i = 0; i < count_; ++i) check(i);  // names the first bad view
  }
  /// Raises ValueError if key i is a view whose key is not inside its data buffer.
  void check(std::size_t i) const;
  /// Key i, in the array's memory (of views: once validate() has passed).
  std::string_view key(std::size_t i) const {
    if (width_ != 0) return {reinterpret_cast<const char*>(values_) + i * width_, width_};
    return view_key(i);
  }
  /// Keys [begin, end) into `out` (of views: once validate() has passed).
  void keys(std::size_t begin, std::size_t end, std::string_view* out) const {
    // One loop per layout, so that the loop over views has no branch on the layout.
    if (width_ != 0) {
      for (std::size_t i = begin; i < end; ++i)
        out[i - begin] = {reinterpret_cast<const char*>(values_) + i * width_, width_};
      return;
    }
    for (std::size_t i = begin; i < end; ++i) out[i - begin] = view_key(i);
  }

 private:
  static constexpr std::size_t kViewSize = 16;
  static constexpr std::int32_t kInlineSize = 12;

  struct View {
    std::int32_t length;
    std::int32_t prefix;  // of an inline key: its first 4 bytes
    std::int32_t buffer;  // of an inline key: its bytes 4 to 8
    std::int32_t offset;  // of an inline key: its bytes 8 to 12
  };

  View view(std::size_t i) const {
    View v;
    std::memcpy(&v, values_ + i * kViewSize, kViewSize);
    return v;
  }
  /// A view's buffer index, or the sentinel entry past the data buffers for any index outside
  /// them (or an inline key's bytes), so that the tables below are read without a branch.
  std::size_t entry(std::int32_t buffer) const {
    return std::min(static_cast<std::uint32_t>(buffer), static_cast<std::uint32_t>(sizes_.size()));
  }
  /// Both places a key may be are computed and one is selected, without a branch: which one a
  /// key takes follows its length, which mixed lengths make unpredictable.
  std::string_view view_key(std::size_t i) const {
    const View v = view(i);
    const auto inline_at = reinterpret_cast<std::uintptr_t>(values_ + i * kViewSize + 4);
    const std::uintptr_t stored_at = bases_[entry(v.buffer)] + static_cast<std::uint32_t>(v.offset);
    const std::uintptr_t at = v.length <= kInlineSize ? inline_at : stored_at;
    return {reinterpret_cast<const char*>(at), static_cast<std::size_t>(v.length)};
  }
  /// Whether every view is well formed and inside its buffer: what check() asks of each, in one
  /// pass without branches (check() then names the first bad one).
  bool views_inside() const {
    bool bad = false;
    for (std::size_t i = 0; i < count_; ++i) {
      const View v = view(i);
      const std::int64_t end = std::int64_t{v.offset} + v.length;
      bad |= (v.length < 0) |
             ((v.length > kInlineSize) & ((v.offset < 0) | (end > limits_[entry(v.buffer)])));
    }
    return !bad;
  }

  const std::uint8_t* values_ = nullptr;  // the keys (fixed) or the views
  std::size_t count_ = 0;
  std::size_t width_ = 0;            // of fixed-size keys; 0 for views
  std::vector<std::int64_t> sizes_;  // of each data buffer
  // Per data buffer, then one sentinel entry: its address (sentinel 0), and the end a key in it
  // may reach (its size; -1 for a missing buffer and the sentinel, which no key may reach).
  std::vector<std::uintptr_t> bases_;
  std::vector<std::int64_t> limits_;
};

/// A byte-string bulk call's `offsets` argument: Arrow-style int32 or int64 offsets into its
/// `data`, or an Arrow array's keys in another layout (with `data` None).
using KeyOffsets = std::variant<OffsetArray, const ArrowByteKeys*>;
using KeyData = std::optional<ByteArray>;

/// Byte-string keys: in Arrow's offsets layout, key i is data[offsets[i], offsets[i + 1]); or an
/// ArrowByteKeys. The offsets or views are checked (offsets non-decreasing, inside the data;
/// views inside their buffers) before any key is used, and each chunk's string_views are built
/// in one reused buffer.
class ByteKeys {
 public:
  ByteKeys(const KeyOffsets& offsets, const KeyData& data);

  /// Number of keys.
  std::size_t size() const { return count_; }
  /// Raises ValueError naming the first bad offset or view. Call without the GIL.
  void validate() const;
  /// The keys [begin, end) as string_views (valid until the next call).
  std::span<const std::string_view> chunk(std::size_t begin, std::size_t end);

 private:
  std::uint64_t offset(std::size_t i) const;
  /// views_[0, end - begin): keys [begin, end) of offsets + data, whose offsets are `offsets`.
  template <typename Offset>
  void offset_keys(const Offset* offsets, std::size_t begin, std::size_t end);

  const ArrowByteKeys* arrow_ = nullptr;  // the keys, when they are not offsets + data
  const void* offsets_ = nullptr;
  bool wide_ = false;  // int64 offsets (large_string / large_binary), else int32
  std::size_t count_ = 0;
  const char* data_ = nullptr;
  std::size_t data_size_ = 0;
  std::vector<std::string_view> views_;
};

/// A shared_mutex taken for reading, as a lockable: calls that only read a filter run at once.
struct ReadLock {
  std::shared_mutex& mutex;
  void lock() { mutex.lock_shared(); }
  bool try_lock() { return mutex.try_lock_shared(); }
  void unlock() { mutex.unlock_shared(); }
};

/// bulkbloom._core.Filter: a Filter with a lock. Calls that only read take it shared, writes alone.
struct PyFilter {
  PyFilter(Filter f, Options o) : filter(std::move(f)), options(std::move(o)) {}

  Filter filter;
  Options options;  // what copies and loaded images are made with
  std::shared_mutex mutex;
  ReadLock reading{mutex};
};

/// bulkbloom._core.WindowedFilter: a WindowedFilter with a lock (every call takes it alone).
struct PyWindow {
  explicit PyWindow(WindowedFilter w, std::optional<StateDirectory> d = {})
      : window(std::move(w)), directory(std::move(d)) {}

  WindowedFilter window;
  std::optional<StateDirectory> directory;  // of the last save_dir() or load_dir()
  std::mutex mutex;
  std::mutex& reading = mutex;  // a window's reads are not shared either
};

/// Saves `state` with `extra` (its FileState or caller metadata) into the state directory `dir`
/// through `directory`, the one the object last saved into or loaded from, so that a save writes
/// what changed since then; another `dir` is opened afresh (its first save writes the open part
/// whole: the change log ran for the other). Returns the bytes written.
template <typename State, typename Extra>
std::uint64_t save_into(std::optional<StateDirectory>& directory, const std::filesystem::path& dir,
                        State& state, const Extra& extra) {
  if (!directory || directory->path() != dir) directory.emplace(dir);
  return directory->save(state, extra);
}

/// A window configuration from the Python keywords; the clock is "records" or "event_time".
WindowConfig make_window_config(const std::string& clock, std::uint64_t window,
                                std::uint32_t generations, std::uint64_t lateness,
                                const Layout& generation);

/// The configuration as a dict (clock, window, generations, lateness, period, forget_after,
/// memory_bytes, generation, description).
nb::dict window_config_dict(const WindowConfig& config);

/// What a load returns to Python: the new object, and the file's keys_inserted and metadata.
template <typename Py>
using Loaded = std::tuple<Py*, std::uint64_t, nb::bytes>;

/// Runs `read(&state)` (a load of a file or byte image) without the GIL, and wraps what it read
/// in a new `Py` made with `options` (a window keeps its options itself: made without them).
template <typename Py, typename Read>
Loaded<Py> load_into(const Options& options, Read&& read) {
  FileState state;
  auto object = [&] {
    nb::gil_scoped_release release;
    return read(&state);
  }();
  Py* py = nullptr;
  if constexpr (std::is_constructible_v<Py, decltype(object), const Options&>) {
    py = new Py(std::move(object), options);
  } else {
    py = new Py(std::move(object));
  }
  return {py, state.keys_inserted, to_bytes(state.metadata)};
}

/// Each of `shards` (what split or reshard made) in a new binding object `Py` made with `options`,
/// for Python to own.
template <typename Py, typename Shard>
std::vector<Py*> wrapped(std::vector<Shard> shards, const Options& options) {
  std::vector<Py*> result;
  result.reserve(shards.size());
  for (Shard& shard : shards) result.push_back(new Py(std::move(shard), options));
  return result;
}

/// `op(copies, options)`, the library's concat or reshard, on copies of the Python shards
/// `shards` that `copy_all(shards, options)` makes with the first shard's options, all without the
/// GIL: the library takes the shards side by side, and each Python shard owns its own. `what`
/// names the call in the error for no shards.
template <typename Py, typename CopyAll, typename Op>
auto on_shard_copies(const std::vector<Py*>& shards, const char* what, CopyAll&& copy_all,
                     Op&& op) {
  if (shards.empty()) throw std::invalid_argument(std::string(what) + ": no shards");
  const Options options = shards.front()->options;
  nb::gil_scoped_release release;
  return op(copy_all(shards, options), options);
}

/// A host byte array as bytes.
inline std::span<const std::byte> as_bytes(const ByteArray& image) {
  return {reinterpret_cast<const std::byte*>(image.data()), image.shape(0)};
}

/// Binds the calls every kind that saves with keys_inserted and metadata has alike, on `cls`, the
/// class of `Py` whose `member` is the library's object: static `load(path, backend,
/// implementation, threads)` and `from_file_bytes(image, ...)`, both returning (object,
/// keys_inserted, metadata) and reading with `read(source, &state, options)` (source a path or a
/// byte span), and `save(path, keys_inserted, metadata)` and `to_file_bytes(keys_inserted,
/// metadata)`, which write under the object's read lock. `kind` names the file ("filter", ...).
/// Python pickles every kind through from_file_bytes and to_file_bytes.
template <typename Py, typename Object, typename Read>
void def_file_calls(nb::class_<Py>& cls, Object Py::*member, Read read, const std::string& kind) {
  cls.def_static(
         "load",
         [read](const std::filesystem::path& path, const std::string& backend,
                const std::string& implementation, unsigned threads) {
           const Options options = make_options(backend, implementation, threads);
           return load_into<Py>(options,
                                [&](FileState* state) { return read(path, state, options); });
         },
         nb::arg("path"), nb::arg("backend"), nb::arg("implementation"), nb::arg("threads"),
         nb::rv_policy::take_ownership,
         ("Reads and verifies a " + kind + " file: (object, keys_inserted, metadata).").c_str())
      .def_static(
          "from_file_bytes",
          [read](const ByteArray& image, const std::string& backend,
                 const std::string& implementation, unsigned threads) {
            const Options options = make_options(backend, implementation, threads);
            return load_into<Py>(
                options, [&](FileState* state) { return read(as_bytes(image), state, options); });
          },
          nb::arg("image"), nb::arg("backend"), nb::arg("implementation"), nb::arg("threads"),
          nb::rv_policy::take_ownership,
          ("Reads the bytes of a " + kind + " file: (object, keys_inserted, metadata).").c_str())
      .def(
          "save",
          [member](Py& self, const std::filesystem::path& path, std::uint64_t keys_inserted,
                   const nb::bytes& metadata) {
            const FileState state = file_state(keys_inserted, metadata);
            locked(self.reading, [&] { save(self.*member, path, state); });
          },
          nb::arg("path"), nb::arg("keys_inserted"), nb::arg("metadata"),
          ("Writes the " + kind + " file atomically (temporary file, fsync, rename).").c_str())
      .def(
          "to_file_bytes",
          [member](Py& self, std::uint64_t keys_inserted, const nb::bytes& metadata) {
            const FileState state = file_state(keys_inserted, metadata);
            const auto image =
                locked(self.reading, [&] { return to_file_bytes(self.*member, state); });
            return to_bytes(image);
          },
          nb::arg("keys_inserted"), nb::arg("metadata"), "The bytes of the file save() writes.");
}

/// Runs `body(begin, end)` on consecutive chunks of [0, count) with the GIL released and `mutex`
/// held, checking for KeyboardInterrupt (and other signal handlers' exceptions) between chunks.
/// The lock is never held while the GIL is being taken back, so no two threads can deadlock.
template <typename Mutex, typename Body>
void in_chunks(Mutex& mutex, std::size_t count, Body&& body) {
  std::size_t begin = 0;
  do {
    const std::size_t end = std::min(count, begin + kChunkKeys);
    {
      nb::gil_scoped_release release;
      std::lock_guard lock(mutex);
      body(begin, end);
    }
    begin = end;
    if (begin < count && PyErr_CheckSignals() != 0) throw nb::python_error();
  } while (begin < count);
}

/// Runs `body()` with the GIL released and `mutex` held (calls that are not split into chunks).
template <typename Mutex, typename Body>
auto locked(Mutex& mutex, Body&& body) {
  nb::gil_scoped_release release;
  std::lock_guard lock(mutex);
  return body();
}

void bind_filter(nb::module_& m);
void bind_window(nb::module_& m);
void bind_shard(nb::module_& m);
void bind_window_shard(nb::module_& m);
void bind_arrow(nb::module_& m);
void bind_grown(nb::module_& m);

}  // namespace bulkbloom::python
