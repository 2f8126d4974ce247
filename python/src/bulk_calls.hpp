// What the filter, window and shard bindings share: the six bulk calls (insert, contains,
// insert_if_absent; uint64 and byte-string keys), each in chunks, without the GIL, under the
// object's lock (shared for contains, alone for writes); a shard's place; a window's clock.
#pragma once

#include <cstdint>
#include <span>
#include <tuple>

#include "bindings.hpp"

namespace bulkbloom::python {

/// Byte-string keys whose offsets were checked (without the GIL).
inline ByteKeys checked_keys(const KeyOffsets& offsets, const KeyData& data) {
  ByteKeys keys(offsets, data);
  nb::gil_scoped_release release;
  keys.validate();
  return keys;
}

/// The bulk calls of `Py` (a binding object with `mutex` and `reading` locks) on its member
/// `Target`: a Filter or FilterShard, or for the reads a WindowedFilter or WindowShard.
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
  static void insert_bytes(Py& self, const KeyOffsets& offsets, const KeyData& data) {
    ByteKeys keys = checked_keys(offsets, data);
    in_chunks(self.mutex, keys.size(), [&](std::size_t begin, std::size_t end) {
      (self.*Target).insert(keys.chunk(begin, end));
    });
  }

  template <typename Py>
  static void contains_bytes(Py& self, const KeyOffsets& offsets, const KeyData& data,
                             FlagArray out) {
    ByteKeys keys = checked_keys(offsets, data);
    require_length(out, keys.size(), "contains");
    std::uint8_t* flags = out.data();
    in_chunks(self.reading, keys.size(), [&](std::size_t begin, std::size_t end) {
      (self.*Target).contains(keys.chunk(begin, end), std::span(flags + begin, end - begin));
    });
  }

  template <typename Py>
  static std::uint64_t insert_if_absent_bytes(Py& self, const KeyOffsets& offsets,
                                              const KeyData& data, FlagArray out) {
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

  /// Adds contains and contains_bytes to the class binding `cls`.
  template <typename Py>
  static void bind_reads(nb::class_<Py>& cls) {
    cls.def("contains", &contains<Py>, nb::arg("keys").noconvert(), nb::arg("out").noconvert(),
            "Writes 1 to out[i] if keys[i] may be present. A pure read.")
        .def("contains_bytes", &contains_bytes<Py>, nb::arg("offsets").noconvert(),
             nb::arg("data").noconvert().none(), nb::arg("out").noconvert(),
             "contains() for byte-string keys.");
  }

  /// Adds the six calls to the class binding `cls`.
  template <typename Py>
  static void bind(nb::class_<Py>& cls) {
    bind_reads(cls);
    cls.def("insert", &insert<Py>, nb::arg("keys").noconvert(), "Inserts uint64 keys.")
        .def("insert_if_absent", &insert_if_absent<Py>, nb::arg("keys").noconvert(),
             nb::arg("out").noconvert(),
             "Inserts each key; out[i] = 1 if it was absent before. Returns the number of 1s.")
        .def("insert_bytes", &insert_bytes<Py>, nb::arg("offsets").noconvert(),
             nb::arg("data").noconvert().none(),
             "Inserts byte-string keys: Arrow offsets + data, or ArrowByteKeys and None.")
        .def("insert_if_absent_bytes", &insert_if_absent_bytes<Py>, nb::arg("offsets").noconvert(),
             nb::arg("data").noconvert().none(), nb::arg("out").noconvert(),
             "insert_if_absent() for byte-string keys.");
  }
};

/// Adds a shard's place (index, num_shards, blocks) and implementation to `cls`, whose objects
/// hold a FilterShard or WindowShard as member `Target`.
template <auto Target, typename Py>
void bind_shard_place(nb::class_<Py>& cls) {
  cls.def_prop_ro(
         "index", [](Py& self) { return (self.*Target).index(); }, "Which shard this is.")
      .def_prop_ro(
          "num_shards", [](Py& self) { return (self.*Target).num_shards(); },
          "How many shards the whole filter or window is cut into.")
      .def_prop_ro(
          "blocks",
          [](Py& self) {
            return std::make_tuple((self.*Target).blocks().begin, (self.*Target).blocks().end);
          },
          "The blocks [begin, end) of the whole layout (of each generation) this shard holds.")
      .def_prop_ro(
          "implementation",
          [](Py& self) {
            // Locked: a window shard's rotation in another thread replaces what it reads.
            return locked(self.reading, [&] { return (self.*Target).implementation(); });
          },
          "The running implementation, e.g. \"cpu/AVX2\".");
}

/// Adds a window's clock and reads (advance_to, records_seen, clock_time, rotations, current_fpr)
/// and its sizing (set_sizing, overfull_generations, expected_false_drops, memory_bytes) to `cls`,
/// whose objects hold a WindowedFilter or WindowShard as member `Target` and a `mutex`.
template <auto Target, typename Py>
void bind_window_clock(nb::class_<Py>& cls) {
  cls.def(
         "advance_to",
         [](Py& self, std::int64_t clock) {
           locked(self.mutex, [&] { (self.*Target).advance_to(clock); });
         },
         nb::arg("time"), "Moves the clock to `time` with no record, rotating as due.")
      .def_prop_ro(
          "records_seen",
          [](Py& self) {
            return locked(self.mutex, [&] { return (self.*Target).records_seen(); });
          },
          "Records processed so far (new and dropped).")
      .def_prop_ro(
          "clock_time",
          [](Py& self) { return locked(self.mutex, [&] { return (self.*Target).clock_time(); }); },
          "Event-time clock: the largest time seen, or None before the first record.")
      .def_prop_ro(
          "rotations",
          [](Py& self) { return locked(self.mutex, [&] { return (self.*Target).rotations(); }); },
          "Periods the clock has moved on since it started.")
      .def(
          "current_fpr",
          [](Py& self) { return locked(self.mutex, [&] { return (self.*Target).current_fpr(); }); },
          "False-positive rate as it is now.")
      .def(
          "set_sizing",
          [](Py& self, std::uint64_t min_keys, std::uint64_t max_keys) {
            locked(self.mutex, [&] { (self.*Target).set_sizing({min_keys, max_keys}); });
          },
          nb::arg("min_keys"), nb::arg("max_keys"),
          "Sizes the generations started from now on (WindowedFilter::set_sizing).")
      .def_prop_ro(
          "overfull_generations",
          [](Py& self) {
            return locked(self.mutex, [&] { return (self.*Target).overfull_generations(); });
          },
          "Generations found over their size since this object was made or loaded.")
      .def_prop_ro(
          "expected_false_drops",
          [](Py& self) {
            return locked(self.mutex, [&] { return (self.*Target).expected_false_drops(); });
          },
          "Never-seen keys expected to have been reported seen, summed over the calls.")
      .def_prop_ro(
          "memory_bytes",
          [](Py& self) {
            return locked(self.mutex, [&] { return (self.*Target).memory_bytes(); });
          },
          "Bytes of all generations as they are now.");
}

}  // namespace bulkbloom::python
