// bulkbloom._core.GrownFilter: a GrownFilter with a lock (contains takes it shared,
// insert_if_absent alone), its files and byte images with the caller's metadata, and the
// module functions the package's load() and Filter(capacity, fpr) use: file_kind,
// promised_layout and sizing_record.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <bulkbloom/format.hpp>
#include <bulkbloom/grown_filter.hpp>

#include <filesystem>
#include <tuple>

#include "bindings.hpp"
#include "bulk_calls.hpp"

namespace bulkbloom::python {
namespace {

struct PyGrown {
  explicit PyGrown(GrownFilter f, std::optional<StateDirectory> d = {})
      : filter(std::move(f)), directory(std::move(d)) {}

  GrownFilter filter;
  std::optional<StateDirectory> directory;  // of the last save_dir() or load_dir()
  std::shared_mutex mutex;
  ReadLock reading{mutex};
};

/// What a load returns to Python: the filter and the caller's metadata saved with it.
template <typename Read>
std::tuple<PyGrown*, nb::bytes> load_grown(Read&& read) {
  std::vector<std::byte> caller;
  auto filter = [&] {
    nb::gil_scoped_release release;
    return read(&caller);
  }();
  return {new PyGrown(std::move(filter)), to_bytes(caller)};
}

std::span<const std::byte> bytes_of(const nb::bytes& bytes) {
  return {reinterpret_cast<const std::byte*>(bytes.c_str()), bytes.size()};
}

const char* kind_name(FileKind kind) {
  switch (kind) {
    case FileKind::filter:
      return "filter";
    case FileKind::filter_shard:
      return "filter shard";
    case FileKind::grown_filter:
      return "grown filter";
    case FileKind::window:
      return "window";
    case FileKind::unknown:
      break;
  }
  return "unknown";
}

}  // namespace

void bind_grown(nb::module_& m) {
  using Calls = BulkCalls<&PyGrown::filter>;
  nb::class_<PyGrown> cls(m, "GrownFilter", "A filter that grows (see bulkbloom.GrownFilter).");
  Calls::bind_reads(cls);
  cls.def_static(
         "for_capacity",
         [](std::uint64_t capacity, double fpr, const std::string& key_format,
            const std::string& backend, const std::string& implementation, unsigned threads) {
           const Options options = make_options(backend, implementation, threads);
           return new PyGrown(GrownFilter::for_capacity(capacity, fpr, key_format, options));
         },
         nb::arg("capacity"), nb::arg("fpr"), nb::arg("key_format"), nb::arg("backend"),
         nb::arg("implementation"), nb::arg("threads"), nb::rv_policy::take_ownership,
         "One generation sized for `capacity` keys at 3/4 of the promised `fpr`.")
      .def_static(
          "load",
          [](const std::filesystem::path& path, double default_fpr, const std::string& backend,
             const std::string& implementation, unsigned threads) {
            const Options options = make_options(backend, implementation, threads);
            return load_grown([&](std::vector<std::byte>* caller) {
              return GrownFilter::load(path, options, caller, default_fpr);
            });
          },
          nb::arg("path"), nb::arg("default_fpr"), nb::arg("backend"), nb::arg("implementation"),
          nb::arg("threads"), nb::rv_policy::take_ownership,
          "Reads a grown filter file or a filter file: (filter, metadata).")
      .def_static(
          "load_dir",
          [](const std::filesystem::path& dir, const std::string& backend,
             const std::string& implementation, unsigned threads) {
            const Options options = make_options(backend, implementation, threads);
            std::vector<std::byte> caller;
            StateDirectory directory(dir);
            GrownFilter filter = [&] {
              nb::gil_scoped_release release;
              return directory.load_grown(&caller, options);
            }();
            return std::tuple<PyGrown*, nb::bytes>{
                new PyGrown(std::move(filter), std::move(directory)), to_bytes(caller)};
          },
          nb::arg("dir"), nb::arg("backend"), nb::arg("implementation"), nb::arg("threads"),
          nb::rv_policy::take_ownership,
          "Reads and verifies the grown filter in state directory dir: (filter, metadata).")
      .def_static(
          "from_file_bytes",
          [](const ByteArray& image, double default_fpr, const std::string& backend,
             const std::string& implementation, unsigned threads) {
            const Options options = make_options(backend, implementation, threads);
            return load_grown([&](std::vector<std::byte>* caller) {
              return GrownFilter::load(as_bytes(image), options, caller, default_fpr);
            });
          },
          nb::arg("image"), nb::arg("default_fpr"), nb::arg("backend"), nb::arg("implementation"),
          nb::arg("threads"), nb::rv_policy::take_ownership,
          "Reads the bytes to_file_bytes() made: (filter, metadata).")
      .def(
          "save",
          [](PyGrown& self, const std::filesystem::path& path, const nb::bytes& metadata) {
            locked(self.reading, [&] { self.filter.save(path, bytes_of(metadata)); });
          },
          nb::arg("path"), nb::arg("metadata"),
          "Writes the file atomically (a filter file while there is one generation).")
      .def(
          "save_dir",
          [](PyGrown& self, const std::filesystem::path& dir, const nb::bytes& metadata) {
            return locked(self.mutex, [&] {
              return save_into(self.directory, dir, self.filter, bytes_of(metadata));
            });
          },
          nb::arg("dir"), nb::arg("metadata"),
          "Commits the filter into state directory dir, writing what changed since its last "
          "save there; returns the bytes written.")
      .def(
          "to_file_bytes",
          [](PyGrown& self, const nb::bytes& metadata) {
            const auto image =
                locked(self.reading, [&] { return self.filter.to_file_bytes(bytes_of(metadata)); });
            return to_bytes(image);
          },
          nb::arg("metadata"), "The bytes of the file save() writes.")
      .def("insert_if_absent", &Calls::insert_if_absent<PyGrown>, nb::arg("keys").noconvert(),
           nb::arg("out").noconvert(),
           "Inserts each key no generation holds; out[i] = 1 if it was absent. Returns the 1s.")
      .def("insert_if_absent_bytes", &Calls::insert_if_absent_bytes<PyGrown>,
           nb::arg("offsets").noconvert(), nb::arg("data").noconvert().none(),
           nb::arg("out").noconvert(), "insert_if_absent() for byte-string keys.")
      .def(
          "current_fpr",
          [](PyGrown& self) {
            return locked(self.reading, [&] { return self.filter.current_fpr(); });
          },
          "False-positive rate now, from the bits of every generation.")
      .def_prop_ro(
          "promised_fpr", [](PyGrown& self) { return self.filter.promised_fpr(); },
          "The rate the filter never passes.")
      .def_prop_ro(
          "capacity",
          [](PyGrown& self) {
            return locked(self.reading, [&] { return self.filter.capacity(); });
          },
          "Keys the first generation is sized for.")
      .def_prop_ro(
          "key_format", [](PyGrown& self) { return self.filter.key_format(); },
          "How its keys were read (a CLI --format name; empty: unknown).")
      .def_prop_ro(
          "keys_inserted",
          [](PyGrown& self) { return locked(self.reading, [&] { return self.filter.keys(); }); },
          "Keys taken by all generations.")
      .def_prop_ro(
          "implementation",
          [](PyGrown& self) {
            // Locked: a growth in another thread reallocates the generations.
            return locked(self.reading, [&] { return self.filter.newest().implementation(); });
          },
          "The running implementation, e.g. \"cpu/AVX2\".")
      .def_prop_ro(
          "generations",
          [](PyGrown& self) {
            struct Row {
              Layout layout;
              std::uint64_t capacity;
              double target;
              std::uint64_t keys;
            };
            // Copied under the lock without the GIL (a long insert holds the lock), then
            // made into Python objects with it.
            const std::vector<Row> rows = locked(self.reading, [&] {
              std::vector<Row> copied;
              for (const GrownFilter::Generation& g : self.filter.generations()) {
                copied.push_back({g.filter.layout(), g.capacity, g.target, g.keys});
              }
              return copied;
            });
            nb::list out;
            for (const Row& row : rows) {
              nb::dict d;
              d["layout"] = layout_dict(row.layout);
              d["capacity"] = row.capacity;
              d["target_fpr"] = row.target;
              d["keys"] = row.keys;
              out.append(d);
            }
            return out;
          },
          "Each generation, oldest first: layout, capacity, target_fpr, keys.");

  m.def(
      "file_kind",
      [](const std::filesystem::path& path) {
        nb::gil_scoped_release release;
        return kind_name(file_kind(path));
      },
      nb::arg("path"),
      "\"filter\", \"filter shard\", \"grown filter\", \"window\" (whole or a shard's) or "
      "\"unknown\".");
  m.def(
      "state_kind",
      [](const std::filesystem::path& dir) {
        nb::gil_scoped_release release;
        switch (StateDirectory(dir).stored_kind()) {
          case StateDirectory::Kind::window:
            return "window";
          case StateDirectory::Kind::window_shard:
            return "window shard";
          case StateDirectory::Kind::grown:
            break;
        }
        return "grown filter";
      },
      nb::arg("dir"),
      "What the state directory dir holds: \"window\", \"window shard\" or \"grown "
      "filter\".");
  m.def(
      "promised_layout",
      [](std::uint64_t capacity, double fpr) {
        return layout_dict(GrownFilter::first_layout(capacity, fpr));
      },
      nb::arg("capacity"), nb::arg("fpr"),
      "The layout of a filter promising `fpr` at `capacity` keys (sized at 3/4 of `fpr`).");
  m.def(
      "first_generation_target", [](double fpr) { return GrownFilter::generation_target(fpr, 0); },
      nb::arg("fpr"),
      "The rate at which the first generation of a filter promising `fpr` is full (3/4 of it).");
  m.def(
      "sizing_record",
      [](std::uint64_t capacity, double fpr, const std::string& key_format) {
        return to_bytes(sizing_record_bytes({fpr, key_format, capacity}));
      },
      nb::arg("capacity"), nb::arg("fpr"), nb::arg("key_format"),
      "The metadata that records a one-generation filter's sizing (docs/FORMAT.md).");
}

}  // namespace bulkbloom::python
