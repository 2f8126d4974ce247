// bulkbloom._core.Filter: a Filter with a lock. The C++ Filter's const calls may run at once, a
// write only alone (a write meeting another on a cache line would lose bits), so calls that read
// take the lock shared and writes take it exclusive, after releasing the GIL.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <bulkbloom/format.hpp>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <span>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "bulk_calls.hpp"

namespace bulkbloom::python {
namespace {

// Set operations lock both filters (in an order std::scoped_lock makes deadlock-free); a filter
// combined with itself is left as it is, which is what OR and AND with itself give.
template <typename Op>
void combine(PyFilter& self, PyFilter& other, Op op) {
  if (&self == &other) return;
  nb::gil_scoped_release release;
  std::scoped_lock lock(self.mutex, other.reading);
  op(self.filter, other.filter);
}

// A filter's bytes in host memory: its own on the CPU backend, else a copy into `copy`.
std::span<const std::byte> host_bytes(const Filter& filter, std::vector<std::byte>& copy) {
  const std::size_t size = filter.layout().size_bytes();
  if (filter.implementation().starts_with("cpu")) return {filter.view().data(), size};
  copy.resize(size);
  filter.copy_bytes_to(copy);
  return copy;
}

// Compares the bits of two filters of the same layout 64 bits at a time: true if `differ` is
// false for every word pair (a, b). Both are locked for reading; a filter compared with itself
// is not locked twice.
template <typename Differ>
bool compare_bits(PyFilter& self, PyFilter& other, Differ differ) {
  if (self.filter.layout() != other.filter.layout())
    throw std::invalid_argument("the filters' layouts differ: " + self.filter.layout().describe() +
                                " and " + other.filter.layout().describe());
  const auto compare = [&] {
    std::vector<std::byte> self_copy, other_copy;
    const auto a = host_bytes(self.filter, self_copy);
    const auto b = host_bytes(other.filter, other_copy);
    for (std::size_t at = 0; at < a.size(); at += 8) {  // the size is a multiple of a block
      std::uint64_t x, y;
      std::memcpy(&x, a.data() + at, 8);
      std::memcpy(&y, b.data() + at, 8);
      if (differ(x, y)) return false;
    }
    return true;
  };
  nb::gil_scoped_release release;
  if (&self == &other) {
    std::lock_guard lock(self.reading);
    return compare();
  }
  std::scoped_lock lock(self.reading, other.reading);
  return compare();
}

PyFilter* copy_of(PyFilter& self) {
  return locked(self.reading, [&] {
    Filter copy(self.filter.layout(), self.options);
    std::vector<std::byte> bytes(self.filter.layout().size_bytes());
    self.filter.copy_bytes_to(bytes);
    copy.copy_bytes_from(bytes);
    return new PyFilter(std::move(copy), self.options);
  });
}

}  // namespace

void bind_filter(nb::module_& m) {
  nb::class_<PyFilter> cls(m, "Filter", "A blocked Bloom filter (see bulkbloom.Filter).");
  def_file_calls(
      cls, &PyFilter::filter,
      [](const auto& source, FileState* state, const Options& options) {
        return load(source, state, options);
      },
      "filter");
  BulkCalls<&PyFilter::filter>::bind(cls);
  cls.def(
         "__init__",
         [](PyFilter* self, const std::string& shape, std::uint64_t num_blocks,
            const std::string& hash, std::uint64_t seed, const std::string& index,
            const std::string& backend, const std::string& implementation, unsigned threads) {
           const Options options = make_options(backend, implementation, threads);
           const Layout layout = make_layout(shape, num_blocks, hash, seed, index);
           new (self) PyFilter(Filter(layout, options), options);
         },
         nb::arg("shape"), nb::arg("num_blocks"), nb::arg("hash"), nb::arg("seed"),
         nb::arg("index"), nb::arg("backend"), nb::arg("implementation"), nb::arg("threads"),
         "An empty filter with an explicit layout.")
      .def_static(
          "for_capacity",
          [](std::uint64_t capacity, double fpr, const std::string& backend,
             const std::string& implementation, unsigned threads) {
            const Options options = make_options(backend, implementation, threads);
            return new PyFilter(Filter::for_capacity(capacity, fpr, options), options);
          },
          nb::arg("capacity"), nb::arg("fpr"), nb::arg("backend"), nb::arg("implementation"),
          nb::arg("threads"), nb::rv_policy::take_ownership,
          "The smallest filter whose modelled FPR at `capacity` keys is at most `fpr`.")
      .def_static(
          "map",
          [](const std::filesystem::path& path, bool verify, const std::string& implementation,
             unsigned threads) {
            const MapOptions map_options = make_map_options(verify, implementation, threads);
            return load_into<PyFilter>(map_options.options, [&](FileState* state) {
              return map(path, state, map_options);
            });
          },
          nb::arg("path"), nb::arg("verify"), nb::arg("implementation"), nb::arg("threads"),
          nb::rv_policy::take_ownership,
          "Maps a filter file without copying (private mapping): (filter, keys_inserted, "
          "metadata).")
      .def_static(
          "from_parquet",
          [](const ByteArray& bytes, const std::string& backend, const std::string& implementation,
             unsigned threads) {
            const Options options = make_options(backend, implementation, threads);
            nb::gil_scoped_release release;
            return new PyFilter(from_parquet(as_bytes(bytes), options), options);
          },
          nb::arg("bytes"), nb::arg("backend"), nb::arg("implementation"), nb::arg("threads"),
          nb::rv_policy::take_ownership,
          "Reads a Parquet split-block Bloom filter (Thrift header followed by the bitset).")
      .def_prop_ro(
          "layout", [](PyFilter& self) { return layout_dict(self.filter.layout()); },
          "The layout as a dict.")
      .def_prop_ro(
          "implementation", [](PyFilter& self) { return self.filter.implementation(); },
          "The running implementation, e.g. \"cpu/AVX3_DL\".")
      .def_prop_ro(
          "threads", [](PyFilter& self) { return self.filter.threads(); },
          "Worker threads used by bulk calls.")
      .def(
          "insert_one",
          [](PyFilter& self, std::uint64_t key) {
            locked(self.mutex, [&] { self.filter.insert(key); });
          },
          nb::arg("key"), "Inserts one key.")
      .def(
          "contains_one",
          [](PyFilter& self, std::uint64_t key) {
            return locked(self.reading, [&] { return self.filter.contains(key); });
          },
          nb::arg("key"), "True if the key may be present.")
      .def(
          "insert_if_absent_one",
          [](PyFilter& self, std::uint64_t key) {
            return locked(self.mutex, [&] { return self.filter.insert_if_absent(key); });
          },
          nb::arg("key"), "Inserts one key; true if it was absent.")
      .def(
          "merge",
          [](PyFilter& self, PyFilter& other) {
            combine(self, other, [](Filter& a, const Filter& b) { a.merge(b); });
          },
          nb::arg("other"), "Sets this filter to the union with `other`.")
      .def(
          "intersect",
          [](PyFilter& self, PyFilter& other) {
            combine(self, other, [](Filter& a, const Filter& b) { a.intersect(b); });
          },
          nb::arg("other"), "Sets this filter to the bitwise AND with `other`.")
      .def(
          "clear", [](PyFilter& self) { locked(self.mutex, [&] { self.filter.clear(); }); },
          "Clears every bit.")
      .def(
          "same_bits",
          [](PyFilter& self, PyFilter& other) {
            return compare_bits(self, other,
                                [](std::uint64_t a, std::uint64_t b) { return a != b; });
          },
          nb::arg("other"), "True if both filters (of one layout) have the same bits.")
      .def(
          "bits_within",
          [](PyFilter& self, PyFilter& other) {
            return compare_bits(self, other,
                                [](std::uint64_t a, std::uint64_t b) { return (a & ~b) != 0; });
          },
          nb::arg("other"), "True if every bit set here is set in `other` (of the same layout).")
      .def("copy", &copy_of, nb::rv_policy::take_ownership, "An independent copy.")
      .def(
          "popcount",
          [](PyFilter& self) {
            return locked(self.reading, [&] { return self.filter.popcount(); });
          },
          "Number of set bits.")
      .def(
          "estimated_count",
          [](PyFilter& self) {
            return locked(self.reading, [&] { return self.filter.estimated_count(); });
          },
          "Estimated number of distinct keys inserted.")
      .def(
          "current_fpr",
          [](PyFilter& self) {
            return locked(self.reading, [&] { return self.filter.current_fpr(); });
          },
          "False-positive rate of the filter as it is now.")
      .def(
          "expected_fpr",
          [](PyFilter& self, std::uint64_t n) { return self.filter.expected_fpr(n); }, nb::arg("n"),
          "Modelled false-positive rate after n distinct keys.")
      .def(
          "to_parquet",
          [](PyFilter& self) {
            const auto image = locked(self.reading, [&] { return to_parquet(self.filter); });
            return to_bytes(image);
          },
          "The Parquet split-block Bloom filter (sb256, xxh64, seed 0 only).");
}

}  // namespace bulkbloom::python
