// The six bulk calls (insert, contains, insert_if_absent; uint64 and byte-string keys) that the
// filter and shard bindings share: each in chunks, without the GIL, under the object's lock
// (shared for contains, alone for writes).
#pragma once

#include <cstdint>
#include <span>

#include "bindings.hpp"

namespace bulkbloom::python {

/// Byte-string keys whose offsets were checked (without the GIL).
inline ByteKeys checked_keys(const OffsetArray& offsets, const ByteArray& data) {
  ByteKeys keys(offsets, data);
  nb::gil_scoped_release release;
  keys.validate();
  return keys;
}

/// The bulk calls of `Py` (a binding object with `mutex` and `reading` locks) on its member
/// `Target`, a Filter or FilterShard.
template <auto Target>
struct BulkCalls {
  template <typename Py>
  static void insert(Py& self, const KeyArray& keys) {
    const std::uint64_t* data = keys.data();
    in_chunks(self.mutex, keys.shape(0), [&](std::size_t begin, std::size_t end) {
      (self.*Target).insert(std::span(data + begin, end - begin));
    });
  }

  template <typename Py>
  static void contains(Py& self, const KeyArray& keys, FlagArray out) {
    require_length(out, keys.shape(0), "contains");
    const std::uint64_t* data = keys.data();
    std::uint8_t* flags = out.data();
    in_chunks(self.reading, keys.shape(0), [&](std::size_t begin, std::size_t end) {
      (self.*Target)
          .contains(std::span(data + begin, end - begin), std::span(flags + begin, end - begin));
    });
  }

  template <typename Py>
  static std::uint64_t insert_if_absent(Py& self, const KeyArray& keys, FlagArray out) {
    require_length(out, keys.shape(0), "insert_if_absent");
    const std::uint64_t* data = keys.data();
    std::uint8_t* flags = out.data();
    std::uint64_t fresh = 0;
    in_chunks(self.mutex, keys.shape(0), [&](std::size_t begin, std::size_t end) {
      fresh += (self.*Target)
                   .insert_if_absent(std::span(data + begin, end - begin),
                                     std::span(flags + begin, end - begin));
    });
    return fresh;
  }

  template <typename Py>
  static void insert_bytes(Py& self, const OffsetArray& offsets, const ByteArray& data) {
    ByteKeys keys = checked_keys(offsets, data);
    in_chunks(self.mutex, keys.size(), [&](std::size_t begin, std::size_t end) {
      (self.*Target).insert(keys.chunk(begin, end));
    });
  }

  template <typename Py>
  static void contains_bytes(Py& self, const OffsetArray& offsets, const ByteArray& data,
                             FlagArray out) {
    ByteKeys keys = checked_keys(offsets, data);
    require_length(out, keys.size(), "contains");
    std::uint8_t* flags = out.data();
    in_chunks(self.reading, keys.size(), [&](std::size_t begin, std::size_t end) {
      (self.*Target).contains(keys.chunk(begin, end), std::span(flags + begin, end - begin));
    });
  }

  template <typename Py>
  static std::uint64_t insert_if_absent_bytes(Py& self, const OffsetArray& offsets,
                                              const ByteArray& data, FlagArray out) {
    ByteKeys keys = checked_keys(offsets, data);
    require_length(out, keys.size(), "insert_if_absent");
    std::uint8_t* flags = out.data();
    std::uint64_t fresh = 0;
    in_chunks(self.mutex, keys.size(), [&](std::size_t begin, std::size_t end) {
      fresh += (self.*Target)
                   .insert_if_absent(keys.chunk(begin, end), std::span(flags + begin, end - begin));
    });
    return fresh;
  }

  /// Adds the six calls to the class binding `cls`.
  template <typename Py>
  static void bind(nb::class_<Py>& cls) {
    cls.def("insert", &insert<Py>, nb::arg("keys").noconvert(), "Inserts uint64 keys.")
        .def("contains", &contains<Py>, nb::arg("keys").noconvert(), nb::arg("out").noconvert(),
             "Writes 1 to out[i] if keys[i] may be present.")
        .def("insert_if_absent", &insert_if_absent<Py>, nb::arg("keys").noconvert(),
             nb::arg("out").noconvert(),
             "Inserts each key; out[i] = 1 if it was absent before. Returns the number of 1s.")
        .def("insert_bytes", &insert_bytes<Py>, nb::arg("offsets").noconvert(),
             nb::arg("data").noconvert(), "Inserts byte-string keys given as Arrow offsets + data.")
        .def("contains_bytes", &contains_bytes<Py>, nb::arg("offsets").noconvert(),
             nb::arg("data").noconvert(), nb::arg("out").noconvert(),
             "contains() for byte-string keys.")
        .def("insert_if_absent_bytes", &insert_if_absent_bytes<Py>, nb::arg("offsets").noconvert(),
             nb::arg("data").noconvert(), nb::arg("out").noconvert(),
             "insert_if_absent() for byte-string keys.");
  }
};

}  // namespace bulkbloom::python
