// bulkbloom._core.FilterShard and shard_of, split, concat, reshard (DESIGN §9): a FilterShard with
// a lock as the filter binding has, and the routing call engines use to send keys to shards.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <bulkbloom/shard.hpp>

#include <filesystem>
#include <mutex>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "bulk_calls.hpp"

namespace bulkbloom::python {
namespace {

/// Where shard_of() writes each key's shard.
using ShardArray = nb::ndarray<std::uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

struct PyShard {
  PyShard(FilterShard s, Options o) : shard(std::move(s)), options(std::move(o)) {}

  FilterShard shard;
  Options options;  // what copies are made with
  std::shared_mutex mutex;
  ReadLock reading{mutex};
};

void require_shard_length(const ShardArray& out, std::size_t count) {
  if (out.shape(0) != count)
    throw std::invalid_argument("shard_of: the output has " + std::to_string(out.shape(0)) +
                                " elements for " + std::to_string(count) + " keys");
}

void shard_of_keys(const std::string& shape, std::uint64_t num_blocks, const std::string& hash,
                   std::uint64_t seed, const std::string& index, const KeyArray& keys,
                   std::uint32_t num_shards, ShardArray out) {
  const Layout layout = make_layout(shape, num_blocks, hash, seed, index);
  require_shard_length(out, keys.shape(0));
  const std::uint64_t* data = keys.data();
  std::uint32_t* shards = out.data();
  std::mutex unshared;  // shard_of reads nothing shared; in_chunks wants a lock to hold
  in_chunks(unshared, keys.shape(0), [&](std::size_t begin, std::size_t end) {
    shard_of(layout, std::span(data + begin, end - begin), num_shards,
             std::span(shards + begin, end - begin));
  });
}

void shard_of_bytes(const std::string& shape, std::uint64_t num_blocks, const std::string& hash,
                    std::uint64_t seed, const std::string& index, const KeyOffsets& offsets,
                    const KeyData& data, std::uint32_t num_shards, ShardArray out) {
  const Layout layout = make_layout(shape, num_blocks, hash, seed, index);
  ByteKeys keys = checked_keys(offsets, data);
  require_shard_length(out, keys.size());
  std::uint32_t* shards = out.data();
  std::mutex unshared;
  in_chunks(unshared, keys.size(), [&](std::size_t begin, std::size_t end) {
    shard_of(layout, keys.chunk(begin, end), num_shards, std::span(shards + begin, end - begin));
  });
}

std::vector<std::byte> bytes_of(const FilterShard& shard) {
  std::vector<std::byte> bytes(shard.size_bytes());
  shard.copy_bytes_to(bytes);
  return bytes;
}

// The library's concat and reshard take the shards side by side; each Python shard owns its own,
// so they are copied into one vector (under their read locks) first.
std::vector<FilterShard> copies_of(const std::vector<PyShard*>& shards, const Options& options) {
  std::vector<FilterShard> copies;
  copies.reserve(shards.size());
  for (PyShard* py : shards) {
    std::shared_lock lock(py->mutex);
    const FilterShard& shard = py->shard;
    FilterShard& copy =
        copies.emplace_back(shard.layout(), shard.index(), shard.num_shards(), options);
    copy.copy_bytes_from(bytes_of(shard));
  }
  return copies;
}

}  // namespace

void bind_shard(nb::module_& m) {
  m.def(
      "layout_for_capacity",
      [](std::uint64_t capacity, double fpr) {
        return layout_dict(Layout::for_capacity(capacity, fpr));
      },
      nb::arg("capacity"), nb::arg("fpr"),
      "The layout Filter.for_capacity would make, as a dict, without making the filter.");
  m.def(
      "layout_of",
      [](const std::string& shape, std::uint64_t num_blocks, const std::string& hash,
         std::uint64_t seed, const std::string& index) {
        return layout_dict(make_layout(shape, num_blocks, hash, seed, index));
      },
      nb::arg("shape"), nb::arg("num_blocks"), nb::arg("hash"), nb::arg("seed"), nb::arg("index"),
      "An explicit layout, checked, as a dict.");
  m.def(
      "layout_expected_fpr",
      [](const std::string& shape, std::uint64_t num_blocks, const std::string& hash,
         std::uint64_t seed, const std::string& index, std::uint64_t n) {
        return make_layout(shape, num_blocks, hash, seed, index).expected_fpr(n);
      },
      nb::arg("shape"), nb::arg("num_blocks"), nb::arg("hash"), nb::arg("seed"), nb::arg("index"),
      nb::arg("n"), "The layout's modelled false-positive rate after `n` distinct keys.");
  m.def("shard_of", &shard_of_keys, nb::arg("shape"), nb::arg("num_blocks"), nb::arg("hash"),
        nb::arg("seed"), nb::arg("index"), nb::arg("keys").noconvert(), nb::arg("num_shards"),
        nb::arg("out").noconvert(),
        "Writes to out[i] (uint32) the shard of `num_shards` of the layout that owns keys[i].");
  m.def("shard_of_bytes", &shard_of_bytes, nb::arg("shape"), nb::arg("num_blocks"), nb::arg("hash"),
        nb::arg("seed"), nb::arg("index"), nb::arg("offsets").noconvert(),
        nb::arg("data").noconvert().none(), nb::arg("num_shards"), nb::arg("out").noconvert(),
        "shard_of() for byte-string keys (as insert_bytes() takes them).");

  nb::class_<PyShard> cls(m, "FilterShard", "One shard of a filter (see bulkbloom.FilterShard).");
  def_file_calls(
      cls, &PyShard::shard,
      [](const auto& source, FileState* state, const Options& options) {
        return load_shard(source, state, options);
      },
      "shard");
  BulkCalls<&PyShard::shard>::bind(cls);
  bind_shard_place<&PyShard::shard>(cls);
  cls.def(
         "__init__",
         [](PyShard* self, const std::string& shape, std::uint64_t num_blocks,
            const std::string& hash, std::uint64_t seed, const std::string& index,
            std::uint32_t shard, std::uint32_t num_shards, const std::string& backend,
            const std::string& implementation, unsigned threads) {
           const Options options = make_options(backend, implementation, threads);
           const Layout layout = make_layout(shape, num_blocks, hash, seed, index);
           new (self) PyShard(FilterShard(layout, shard, num_shards, options), options);
         },
         nb::arg("shape"), nb::arg("num_blocks"), nb::arg("hash"), nb::arg("seed"),
         nb::arg("index"), nb::arg("shard"), nb::arg("num_shards"), nb::arg("backend"),
         nb::arg("implementation"), nb::arg("threads"),
         "Empty shard `shard` of `num_shards` of an explicit layout.")
      .def_static(
          "map",
          [](const std::filesystem::path& path, bool verify, const std::string& implementation,
             unsigned threads) {
            const MapOptions map_options = make_map_options(verify, implementation, threads);
            return load_into<PyShard>(map_options.options, [&](FileState* state) {
              return map_shard(path, state, map_options);
            });
          },
          nb::arg("path"), nb::arg("verify"), nb::arg("implementation"), nb::arg("threads"),
          nb::rv_policy::take_ownership,
          "Maps a shard file without copying (private mapping): (shard, keys_inserted, metadata).")
      .def_prop_ro(
          "layout", [](PyShard& self) { return layout_dict(self.shard.layout()); },
          "The whole filter's layout as a dict.")
      .def_prop_ro(
          "size_bytes", [](PyShard& self) { return self.shard.size_bytes(); },
          "Size of the shard's bits in bytes.")
      .def(
          "clear", [](PyShard& self) { locked(self.mutex, [&] { self.shard.clear(); }); },
          "Clears every bit.")
      .def(
          "popcount",
          [](PyShard& self) { return locked(self.reading, [&] { return self.shard.popcount(); }); },
          "Number of set bits.")
      .def(
          "bits",
          [](PyShard& self) {
            const auto bytes = locked(self.reading, [&] { return bytes_of(self.shard); });
            return to_bytes(bytes);
          },
          "A copy of the shard's bytes: its blocks of the whole filter.")
      .def(
          "set_bits",
          [](PyShard& self, const ByteArray& bytes) {
            const std::span in(reinterpret_cast<const std::byte*>(bytes.data()), bytes.shape(0));
            locked(self.mutex, [&] {
              if (in.size() != self.shard.size_bytes())
                throw std::invalid_argument("shard bits: " + std::to_string(in.size()) +
                                            " bytes for a shard of " +
                                            std::to_string(self.shard.size_bytes()));
              self.shard.copy_bytes_from(in);
            });
          },
          nb::arg("bytes").noconvert(), "Replaces the shard's bytes (size_bytes long).");

  m.def(
      "split",
      [](PyFilter& filter, std::uint32_t num_shards) {
        auto shards = locked(filter.reading,
                             [&] { return split(filter.filter, num_shards, filter.options); });
        return wrapped<PyShard>(std::move(shards), filter.options);
      },
      nb::arg("filter"), nb::arg("num_shards"), nb::rv_policy::take_ownership,
      "The filter cut into `num_shards` shards, each a copy of its blocks.");
  m.def(
      "concat",
      [](const std::vector<PyShard*>& shards) {
        return on_shard_copies(shards, "concat", copies_of,
                               [](const auto& copies, const Options& options) {
                                 return new PyFilter(concat(copies, options), options);
                               });
      },
      nb::arg("shards"), nb::rv_policy::take_ownership,
      "The whole filter from all its shards, in any order.");
  m.def(
      "reshard",
      [](const std::vector<PyShard*>& shards, std::uint32_t num_shards) {
        return on_shard_copies(
            shards, "reshard", copies_of, [&](const auto& copies, const Options& options) {
              return wrapped<PyShard>(reshard(copies, num_shards, options), options);
            });
      },
      nb::arg("shards"), nb::arg("num_shards"), nb::rv_policy::take_ownership,
      "The same filter cut into `num_shards` shards: a copy of bytes, no key rehashed.");
}

}  // namespace bulkbloom::python
