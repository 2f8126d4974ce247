// bulkbloom._core.WindowShard: a WindowShard with a lock, as the window binding has, and the
// window forms of split, concat and reshard. The caller gives the single window's clock with every
// record (bulkbloom/window_shard.hpp says which value that is).
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <bulkbloom/window_shard.hpp>

#include <filesystem>
#include <mutex>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "bulk_calls.hpp"

namespace bulkbloom::python {
namespace {

struct PyWindowShard {
  PyWindowShard(WindowShard s, Options o, std::optional<StateDirectory> d = {})
      : shard(std::move(s)), options(std::move(o)), directory(std::move(d)) {}

  WindowShard shard;
  Options options;                          // what copies are made with
  std::optional<StateDirectory> directory;  // of the last save_dir() or load_dir()
  std::mutex mutex;
  std::mutex& reading = mutex;  // a window's reads are not shared either
};

void require_clocks(const TimeArray& clocks, std::size_t count) {
  if (clocks.shape(0) != count)
    throw std::invalid_argument("insert_if_absent: " + std::to_string(clocks.shape(0)) +
                                " clocks for " + std::to_string(count) + " keys");
}

// insert_if_absent of uint64 keys, or, with `hashes`, insert_hashes_if_absent of their hashes.
std::uint64_t insert_if_absent_u64(PyWindowShard& self, const KeyArray& keys,
                                   const TimeArray& clocks, FlagArray out, bool hashes) {
  require_length(out, keys.shape(0), "insert_if_absent");
  require_clocks(clocks, keys.shape(0));
  const std::uint64_t* data = keys.data();
  const std::int64_t* times = clocks.data();
  std::uint64_t fresh = 0;
  in_chunks(self.mutex, keys.shape(0), [&](std::size_t begin, std::size_t end) {
    const std::span chunk(data + begin, end - begin);
    const std::span chunk_times(times + begin, end - begin);
    const std::span chunk_out(out.data() + begin, end - begin);
    fresh += hashes ? self.shard.insert_hashes_if_absent(chunk, chunk_times, chunk_out)
                    : self.shard.insert_if_absent(chunk, chunk_times, chunk_out);
  });
  return fresh;
}

std::uint64_t insert_if_absent_keys(PyWindowShard& self, const KeyArray& keys,
                                    const TimeArray& clocks, FlagArray out) {
  return insert_if_absent_u64(self, keys, clocks, out, false);
}

std::uint64_t insert_hashes_if_absent(PyWindowShard& self, const KeyArray& hashes,
                                      const TimeArray& clocks, FlagArray out) {
  return insert_if_absent_u64(self, hashes, clocks, out, true);
}

std::uint64_t insert_if_absent_bytes(PyWindowShard& self, const KeyOffsets& offsets,
                                     const KeyData& data, const TimeArray& clocks, FlagArray out) {
  ByteKeys keys = checked_keys(offsets, data);
  require_length(out, keys.size(), "insert_if_absent");
  require_clocks(clocks, keys.size());
  const std::int64_t* times = clocks.data();
  std::uint64_t fresh = 0;
  in_chunks(self.mutex, keys.size(), [&](std::size_t begin, std::size_t end) {
    fresh +=
        self.shard.insert_if_absent(keys.chunk(begin, end), std::span(times + begin, end - begin),
                                    std::span(out.data() + begin, end - begin));
  });
  return fresh;
}

// As for filter shards: the library takes the shards side by side, so they are copied (through
// their file bytes, which hold the clock too) into one vector first.
std::vector<WindowShard> copies_of(const std::vector<PyWindowShard*>& shards,
                                   const Options& options) {
  std::vector<WindowShard> copies;
  copies.reserve(shards.size());
  for (PyWindowShard* py : shards) {
    std::lock_guard lock(py->mutex);
    const auto image = to_file_bytes(py->shard);
    copies.push_back(load_window_shard(image, nullptr, options));
  }
  return copies;
}

// A window configuration from its fields, checked.
WindowConfig config_of(const std::string& clock, std::uint64_t window, std::uint32_t generations,
                       std::uint64_t lateness, const std::string& shape, std::uint64_t num_blocks,
                       const std::string& hash, std::uint64_t seed, const std::string& index,
                       double fpr, std::uint32_t block_multiple) {
  WindowConfig config = make_window_config(clock, window, generations, lateness,
                                           make_layout(shape, num_blocks, hash, seed, index));
  config.fpr = fpr;
  config.block_multiple = block_multiple;
  config.validate();
  return config;
}

}  // namespace

void bind_window_shard(nb::module_& m) {
  m.def(
      "window_config_of",
      [](const std::string& clock, std::uint64_t window, std::uint32_t generations,
         std::uint64_t lateness, const std::string& shape, std::uint64_t num_blocks,
         const std::string& hash, std::uint64_t seed, const std::string& index, double fpr,
         std::uint32_t block_multiple, std::uint32_t shardable_by) {
        const WindowConfig config = config_of(clock, window, generations, lateness, shape,
                                              num_blocks, hash, seed, index, fpr, block_multiple);
        return window_config_dict(shardable_by == 0 ? config : config.shardable_by(shardable_by));
      },
      nb::arg("clock"), nb::arg("window"), nb::arg("generations"), nb::arg("lateness"),
      nb::arg("shape"), nb::arg("num_blocks"), nb::arg("hash"), nb::arg("seed"), nb::arg("index"),
      nb::arg("fpr"), nb::arg("block_multiple"), nb::arg("shardable_by"),
      "An explicit window configuration, checked, as a dict; with shardable_by S > 0, "
      "WindowConfig::shardable_by(S) of it.");
  m.def(
      "window_of_config",
      [](const std::string& clock, std::uint64_t window, std::uint32_t generations,
         std::uint64_t lateness, const std::string& shape, std::uint64_t num_blocks,
         const std::string& hash, std::uint64_t seed, const std::string& index, double fpr,
         std::uint32_t block_multiple, const std::string& backend,
         const std::string& implementation, unsigned threads) {
        const WindowConfig config = config_of(clock, window, generations, lateness, shape,
                                              num_blocks, hash, seed, index, fpr, block_multiple);
        return new PyWindow(WindowedFilter(config, make_options(backend, implementation, threads)));
      },
      nb::arg("clock"), nb::arg("window"), nb::arg("generations"), nb::arg("lateness"),
      nb::arg("shape"), nb::arg("num_blocks"), nb::arg("hash"), nb::arg("seed"), nb::arg("index"),
      nb::arg("fpr"), nb::arg("block_multiple"), nb::arg("backend"), nb::arg("implementation"),
      nb::arg("threads"), nb::rv_policy::take_ownership,
      "An empty window of a whole configuration, promise and block multiple included.");
  m.def(
      "window_config_for_event_time",
      [](double records_per_unit, std::uint64_t window, double fpr, std::uint32_t generations,
         std::uint64_t lateness) {
        return window_config_dict(
            WindowConfig::for_event_time(records_per_unit, window, fpr, generations, lateness));
      },
      nb::arg("records_per_unit"), nb::arg("window"), nb::arg("fpr"), nb::arg("generations"),
      nb::arg("lateness"),
      "The configuration WindowedFilter.for_event_time would have, without making the window.");
  nb::class_<PyWindowShard> cls(m, "WindowShard", "One shard of a sliding window (see bulkbloom).");
  def_file_calls(
      cls, &PyWindowShard::shard,
      [](const auto& source, FileState* state, const Options& options) {
        return load_window_shard(source, state, options);
      },
      "window shard");
  bind_shard_place<&PyWindowShard::shard>(cls);
  bind_window_clock<&PyWindowShard::shard>(cls);
  BulkCalls<&PyWindowShard::shard>::bind_reads(cls);
  cls.def(
         "__init__",
         [](PyWindowShard* self, const std::string& clock, std::uint64_t window,
            std::uint32_t generations, std::uint64_t lateness, const std::string& shape,
            std::uint64_t num_blocks, const std::string& hash, std::uint64_t seed,
            const std::string& index, std::uint32_t shard, std::uint32_t num_shards,
            const std::string& backend, const std::string& implementation, unsigned threads,
            double fpr, std::uint32_t block_multiple) {
           const WindowConfig config =
               config_of(clock, window, generations, lateness, shape, num_blocks, hash, seed, index,
                         fpr, block_multiple);
           const Options options = make_options(backend, implementation, threads);
           new (self) PyWindowShard(WindowShard(config, shard, num_shards, options), options);
         },
         nb::arg("clock"), nb::arg("window"), nb::arg("generations"), nb::arg("lateness"),
         nb::arg("shape"), nb::arg("num_blocks"), nb::arg("hash"), nb::arg("seed"),
         nb::arg("index"), nb::arg("shard"), nb::arg("num_shards"), nb::arg("backend"),
         nb::arg("implementation"), nb::arg("threads"), nb::arg("fpr"), nb::arg("block_multiple"),
         "Empty shard `shard` of `num_shards` of a window, its clock not started.")
      .def_static(
          "load_dir",
          [](const std::filesystem::path& dir, const std::string& backend,
             const std::string& implementation, unsigned threads) -> Loaded<PyWindowShard> {
            const Options options = make_options(backend, implementation, threads);
            FileState state;
            StateDirectory directory(dir);
            WindowShard shard = [&] {
              nb::gil_scoped_release release;
              return directory.load_window_shard(&state, options);
            }();
            return {new PyWindowShard(std::move(shard), options, std::move(directory)),
                    state.keys_inserted, to_bytes(state.metadata)};
          },
          nb::arg("dir"), nb::arg("backend"), nb::arg("implementation"), nb::arg("threads"),
          nb::rv_policy::take_ownership,
          "Reads and verifies the window shard in state directory dir: (shard, keys_inserted, "
          "metadata).")
      .def_prop_ro(
          "config", [](PyWindowShard& self) { return window_config_dict(self.shard.config()); },
          "The whole window's configuration as a dict.")
      .def_prop_ro(
          "sizes_per_period",
          [](PyWindowShard& self) {
            return locked(self.reading, [&] { return self.shard.sizes_per_period(); });
          },
          "Whether the shard sizes its generations per period (WindowShard::sizes_per_period).")
      .def(
          "filter_keys",
          [](PyWindowShard& self) {
            return locked(self.mutex, [&] { return self.shard.filter_keys(); });
          },
          "The keys each filter of the shard's blocks took, oldest first.")
      .def(
          "filter_blocks",
          [](PyWindowShard& self) {
            return locked(self.mutex, [&] { return self.shard.filter_blocks(); });
          },
          "The whole window's block count of each filter, oldest first.")
      .def(
          "set_window_keys",
          [](PyWindowShard& self, const std::vector<std::uint64_t>& keys) {
            locked(self.mutex, [&] { self.shard.set_window_keys(keys); });
          },
          nb::arg("keys"), "The whole window's keys in each filter (WindowShard::set_window_keys).")

      .def("insert_if_absent", &insert_if_absent_keys, nb::arg("keys").noconvert(),
           nb::arg("clocks").noconvert(), nb::arg("out").noconvert(),
           "Dedups keys in order, clocks[i] the single window's clock at record i.")
      .def("insert_hashes_if_absent", &insert_hashes_if_absent, nb::arg("hashes").noconvert(),
           nb::arg("clocks").noconvert(), nb::arg("out").noconvert(),
           "insert_if_absent() of the keys' hashes under the window's hash and seed.")
      .def("insert_if_absent_bytes", &insert_if_absent_bytes, nb::arg("offsets").noconvert(),
           nb::arg("data").noconvert().none(), nb::arg("clocks").noconvert(),
           nb::arg("out").noconvert(), "insert_if_absent() for byte-string keys.")
      .def(
          "save_dir",
          [](PyWindowShard& self, const std::filesystem::path& dir, std::uint64_t keys_inserted,
             const nb::bytes& metadata) {
            const FileState state = file_state(keys_inserted, metadata);
            return locked(self.mutex,
                          [&] { return save_into(self.directory, dir, self.shard, state); });
          },
          nb::arg("dir"), nb::arg("keys_inserted"), nb::arg("metadata"),
          "Commits the shard into state directory dir, writing what changed since its last "
          "save there; returns the bytes written.");

  m.def(
      "split_window",
      [](PyWindow& window, std::uint32_t num_shards, const std::string& backend,
         const std::string& implementation, unsigned threads) {
        const Options options = make_options(backend, implementation, threads);
        auto shards =
            locked(window.mutex, [&] { return split(window.window, num_shards, options); });
        return wrapped<PyWindowShard>(std::move(shards), options);
      },
      nb::arg("window"), nb::arg("num_shards"), nb::arg("backend"), nb::arg("implementation"),
      nb::arg("threads"), nb::rv_policy::take_ownership,
      "The window cut into `num_shards` shards, each a copy of its blocks and the clock.");
  m.def(
      "concat_window",
      [](const std::vector<PyWindowShard*>& shards) {
        return on_shard_copies(shards, "concat", copies_of,
                               [](const auto& copies, const Options& options) {
                                 return new PyWindow(concat(copies, options));
                               });
      },
      nb::arg("shards"), nb::rv_policy::take_ownership,
      "The whole window from all its shards, in any order.");
  m.def(
      "reshard_window",
      [](const std::vector<PyWindowShard*>& shards, std::uint32_t num_shards) {
        return on_shard_copies(
            shards, "reshard", copies_of, [&](const auto& copies, const Options& options) {
              return wrapped<PyWindowShard>(reshard(copies, num_shards, options), options);
            });
      },
      nb::arg("shards"), nb::arg("num_shards"), nb::rv_policy::take_ownership,
      "The same window cut into `num_shards` shards: a copy of bytes and clock.");
}

}  // namespace bulkbloom::python
