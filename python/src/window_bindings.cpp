// bulkbloom._core.WindowedFilter: a WindowedFilter with a lock, as the filter binding has.
// Batches are cut into chunks in order, which changes no answer: the window's result is the
// per-record loop's for every batch split.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <bulkbloom/window.hpp>

#include <filesystem>
#include <optional>
#include <tuple>

#include "bindings.hpp"
#include "bulk_calls.hpp"

namespace bulkbloom::python {
namespace {

WindowClock parse_clock(const std::string& clock) {
  if (clock == "records") return WindowClock::records;
  if (clock == "event_time") return WindowClock::event_time;
  throw std::invalid_argument("clock must be \"records\" or \"event_time\", not \"" + clock + "\"");
}

// The times of a timed call, or nothing for a records-clock call; checked against the keys.
const std::int64_t* times_for(const std::optional<TimeArray>& times, std::size_t count) {
  if (!times) return nullptr;
  if (times->shape(0) != count)
    throw std::invalid_argument("insert_if_absent: " + std::to_string(times->shape(0)) +
                                " times for " + std::to_string(count) + " keys");
  return times->data();
}

template <typename Keys>
std::uint64_t dedup_chunk(WindowedFilter& window, Keys keys, const std::int64_t* times,
                          std::size_t begin, std::uint8_t* flags) {
  const std::span out(flags + begin, keys.size());
  if (times == nullptr) return window.insert_if_absent(keys, out);
  return window.insert_if_absent(keys, std::span(times + begin, keys.size()), out);
}

std::uint64_t insert_if_absent_keys(PyWindow& self, const KeyArray& keys,
                                    const std::optional<TimeArray>& times, FlagArray out) {
  require_length(out, keys.shape(0), "insert_if_absent");
  const std::int64_t* time_data = times_for(times, keys.shape(0));
  const std::uint64_t* data = keys.data();
  std::uint64_t fresh = 0;
  in_chunks(self.mutex, keys.shape(0), [&](std::size_t begin, std::size_t end) {
    fresh += dedup_chunk(self.window, std::span(data + begin, end - begin), time_data, begin,
                         out.data());
  });
  return fresh;
}

std::uint64_t insert_if_absent_bytes(PyWindow& self, const KeyOffsets& offsets, const KeyData& data,
                                     const std::optional<TimeArray>& times, FlagArray out) {
  ByteKeys keys(offsets, data);
  {
    nb::gil_scoped_release release;
    keys.validate();
  }
  require_length(out, keys.size(), "insert_if_absent");
  const std::int64_t* time_data = times_for(times, keys.size());
  std::uint64_t fresh = 0;
  in_chunks(self.mutex, keys.size(), [&](std::size_t begin, std::size_t end) {
    fresh += dedup_chunk(self.window, keys.chunk(begin, end), time_data, begin, out.data());
  });
  return fresh;
}

}  // namespace

WindowConfig make_window_config(const std::string& clock, std::uint64_t window,
                                std::uint32_t generations, std::uint64_t lateness,
                                const Layout& generation) {
  WindowConfig config;
  config.clock = parse_clock(clock);
  config.window = window;
  config.generations = generations;
  config.lateness = lateness;
  config.generation = generation;
  return config;
}

nb::dict window_config_dict(const WindowConfig& config) {
  nb::dict d;
  d["clock"] = config.clock == WindowClock::records ? "records" : "event_time";
  d["window"] = config.window;
  d["generations"] = config.generations;
  d["lateness"] = config.lateness;
  d["period"] = config.period();
  d["forget_after"] = config.forget_after();
  d["memory_bytes"] = config.memory_bytes();
  d["generation"] = layout_dict(config.generation);
  d["description"] = config.describe();
  d["fpr"] = config.fpr;
  d["block_multiple"] = config.block_multiple;
  return d;
}

void bind_window(nb::module_& m) {
  nb::class_<PyWindow> cls(m, "WindowedFilter", "A sliding-window dedup filter (see bulkbloom).");
  def_file_calls(
      cls, &PyWindow::window,
      [](const auto& source, FileState* state, const Options& options) {
        return load_window(source, state, options);
      },
      "window");
  bind_window_clock<&PyWindow::window>(cls);
  BulkCalls<&PyWindow::window>::bind_reads(cls);
  cls.def(
         "__init__",
         [](PyWindow* self, const std::string& clock, std::uint64_t window,
            std::uint32_t generations, std::uint64_t lateness, const std::string& shape,
            std::uint64_t num_blocks, const std::string& hash, std::uint64_t seed,
            const std::string& index, const std::string& backend, const std::string& implementation,
            unsigned threads) {
           const WindowConfig config =
               make_window_config(clock, window, generations, lateness,
                                  make_layout(shape, num_blocks, hash, seed, index));
           new (self)
               PyWindow(WindowedFilter(config, make_options(backend, implementation, threads)));
         },
         nb::arg("clock"), nb::arg("window"), nb::arg("generations"), nb::arg("lateness"),
         nb::arg("shape"), nb::arg("num_blocks"), nb::arg("hash"), nb::arg("seed"),
         nb::arg("index"), nb::arg("backend"), nb::arg("implementation"), nb::arg("threads"),
         "An empty window with an explicit configuration.")
      .def_static(
          "for_records",
          [](std::uint64_t window_records, double fpr, std::uint32_t generations,
             const std::string& backend, const std::string& implementation, unsigned threads) {
            return new PyWindow(
                WindowedFilter(WindowConfig::for_records(window_records, fpr, generations),
                               make_options(backend, implementation, threads)));
          },
          nb::arg("window_records"), nb::arg("fpr"), nb::arg("generations"), nb::arg("backend"),
          nb::arg("implementation"), nb::arg("threads"), nb::rv_policy::take_ownership,
          "A record-count window.")
      .def_static(
          "for_event_time",
          [](double records_per_unit, std::uint64_t window, double fpr, std::uint32_t generations,
             std::uint64_t lateness, const std::string& backend, const std::string& implementation,
             unsigned threads) {
            return new PyWindow(WindowedFilter(
                WindowConfig::for_event_time(records_per_unit, window, fpr, generations, lateness),
                make_options(backend, implementation, threads)));
          },
          nb::arg("records_per_unit"), nb::arg("window"), nb::arg("fpr"), nb::arg("generations"),
          nb::arg("lateness"), nb::arg("backend"), nb::arg("implementation"), nb::arg("threads"),
          nb::rv_policy::take_ownership, "An event-time window.")
      .def_static(
          "load_dir",
          [](const std::filesystem::path& dir, const std::string& backend,
             const std::string& implementation, unsigned threads) -> Loaded<PyWindow> {
            const Options options = make_options(backend, implementation, threads);
            FileState state;
            StateDirectory directory(dir);
            WindowedFilter window = [&] {
              nb::gil_scoped_release release;
              return directory.load_window(&state, options);
            }();
            return {new PyWindow(std::move(window), std::move(directory)), state.keys_inserted,
                    to_bytes(state.metadata)};
          },
          nb::arg("dir"), nb::arg("backend"), nb::arg("implementation"), nb::arg("threads"),
          nb::rv_policy::take_ownership,
          "Reads and verifies the window in state directory dir: (window, keys_inserted, "
          "metadata).")
      .def_static(
          "load_checkpoint",
          [](const std::filesystem::path& dir, const std::string& backend,
             const std::string& implementation,
             unsigned threads) -> std::optional<Loaded<PyWindow>> {
            const Options options = make_options(backend, implementation, threads);
            auto checkpoint = [&] {
              nb::gil_scoped_release release;
              return load_window_checkpoint(dir, options);
            }();
            if (!checkpoint) return std::nullopt;
            return Loaded<PyWindow>{new PyWindow(std::move(checkpoint->window)),
                                    checkpoint->keys_inserted, to_bytes(checkpoint->metadata)};
          },
          nb::arg("dir"), nb::arg("backend"), nb::arg("implementation"), nb::arg("threads"),
          nb::rv_policy::take_ownership,
          "The latest checkpoint in dir as (window, keys_inserted, metadata), or None.")
      .def_prop_ro(
          "config", [](PyWindow& self) { return window_config_dict(self.window.config()); },
          "The configuration as a dict.")
      .def_prop_ro(
          "implementation",
          [](PyWindow& self) {
            // Locked: a rotation in another thread replaces the generation it reads.
            return locked(self.reading, [&] { return self.window.implementation(); });
          },
          "The running implementation of the generations.")
      .def("insert_if_absent", &insert_if_absent_keys, nb::arg("keys").noconvert(),
           nb::arg("times").noconvert().none(), nb::arg("out").noconvert(),
           "Dedups keys in order; out[i] = 1 if no generation held keys[i].")
      .def("insert_if_absent_bytes", &insert_if_absent_bytes, nb::arg("offsets").noconvert(),
           nb::arg("data").noconvert().none(), nb::arg("times").noconvert().none(),
           nb::arg("out").noconvert(), "insert_if_absent() for byte-string keys.")
      .def(
          "expected_fpr",
          [](PyWindow& self, std::uint64_t keys_per_generation) {
            return self.window.config().expected_fpr(keys_per_generation);
          },
          nb::arg("keys_per_generation"),
          "Modelled FPR when each generation holds this many distinct keys.")
      .def(
          "save_dir",
          [](PyWindow& self, const std::filesystem::path& dir, std::uint64_t keys_inserted,
             const nb::bytes& metadata) {
            const FileState state = file_state(keys_inserted, metadata);
            return locked(self.mutex,
                          [&] { return save_into(self.directory, dir, self.window, state); });
          },
          nb::arg("dir"), nb::arg("keys_inserted"), nb::arg("metadata"),
          "Commits the window into state directory dir, writing what changed since its last "
          "save there; returns the bytes written.")
      .def(
          "save_checkpoint",
          [](PyWindow& self, const std::filesystem::path& dir, std::uint64_t keys_inserted,
             const nb::bytes& metadata) {
            const FileState state = file_state(keys_inserted, metadata);
            locked(self.mutex, [&] { save_checkpoint(dir, self.window, state); });
          },
          nb::arg("dir"), nb::arg("keys_inserted"), nb::arg("metadata"),
          "Saves a checkpoint of the window into dir, atomically.");
}

}  // namespace bulkbloom::python
