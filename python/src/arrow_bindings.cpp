// bulkbloom._core.ArrowChunk and ArrowStream: key batches from the Arrow PyCapsule interface
// (__arrow_c_array__ / __arrow_c_stream__), read in place through the C data interface's structs
// (arrow_c_data.hpp). Integer, string and binary columns reach the bulk calls as numpy views of
// the producer's buffers, owned by the chunk, so that no key becomes a Python object and no
// string is copied. Fixed-size binary and string/binary views are handed out in slices: the
// first with offsets made for the slice, the second (whose strings lie in several buffers)
// compacted into one, a bounded copy of at most one slice.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "arrow_c_data.hpp"
#include "bindings.hpp"

namespace bulkbloom::python {
namespace {

/// How a column's keys lie in its buffers.
enum class KeyLayout {
  integers,   // buffers[1]: the values, `width` bytes each
  offsets32,  // buffers[1]: int32 offsets, buffers[2]: the bytes (string, binary)
  offsets64,  // int64 offsets (large_string, large_binary)
  fixed,      // buffers[1]: `width` bytes per key (fixed_size_binary, uuid)
  views,      // buffers[1]: 16-byte views, then the data buffers and their int64 sizes
};

struct KeyFormat {
  KeyLayout layout = KeyLayout::integers;
  std::size_t width = 0;  // integers and fixed: bytes per key
  nb::dlpack::dtype integer_type{};
  bool one_column = false;  // the keys are the only column of a struct (a record batch)
};

/// A name for an Arrow format string that keys cannot have, for the error message.
std::string type_name(std::string_view format) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"n", "null"},    {"b", "bool"},  {"e", "float16"},     {"f", "float32"},
      {"g", "float64"}, {"+l", "list"}, {"+L", "large list"}, {"+m", "map"},
  };
  for (const auto& [code, name] : kNames)
    if (format == code) return std::string(name);
  if (format == "+s") return "struct (a table or record batch: pass one column)";
  if (format.starts_with("d:")) return "decimal";
  if (format.starts_with("t"))
    return "a date, time or timestamp (Arrow format '" + std::string(format) + "')";
  return "Arrow format '" + std::string(format) + "'";
}

KeyFormat key_format(const ArrowSchema& schema) {
  if (schema.dictionary != nullptr)
    throw nb::type_error(
        "dictionary-encoded (categorical) keys: decode them first (pyarrow: "
        ".dictionary_decode(), polars: .cast(pl.String))");
  const std::string_view format = schema.format == nullptr ? "" : schema.format;
  if (format == "+s" && schema.n_children == 1) {  // a table or query result of one column
    KeyFormat column = key_format(*schema.children[0]);
    column.one_column = true;
    return column;
  }
  struct Integer {
    char code;
    nb::dlpack::dtype type;
  };
  static const Integer kIntegers[] = {
      {'c', nb::dtype<std::int8_t>()},  {'C', nb::dtype<std::uint8_t>()},
      {'s', nb::dtype<std::int16_t>()}, {'S', nb::dtype<std::uint16_t>()},
      {'i', nb::dtype<std::int32_t>()}, {'I', nb::dtype<std::uint32_t>()},
      {'l', nb::dtype<std::int64_t>()}, {'L', nb::dtype<std::uint64_t>()},
  };
  if (format.size() == 1) {
    for (const Integer& integer : kIntegers)
      if (format[0] == integer.code)
        return {KeyLayout::integers, std::size_t{integer.type.bits} / 8, integer.type};
    if (format == "u" || format == "z") return {KeyLayout::offsets32};
    if (format == "U" || format == "Z") return {KeyLayout::offsets64};
  }
  if (format == "vu" || format == "vz") return {KeyLayout::views};
  if (format.starts_with("w:")) {
    const std::size_t width = std::stoull(std::string(format.substr(2)));
    if (width > 0) return {KeyLayout::fixed, width};
  }
  throw nb::type_error(("keys must be an Arrow integer, string, binary, fixed-size binary or "
                        "string/binary view column, not " +
                        type_name(format))
                           .c_str());
}

/// The struct a PyCapsule of the Arrow interface holds; TypeError if it is not one named `name`.
template <typename Struct>
Struct* capsule_pointer(nb::handle capsule, const char* name) {
  auto* pointer = static_cast<Struct*>(PyCapsule_GetPointer(capsule.ptr(), name));
  if (pointer == nullptr) throw nb::python_error();
  if (pointer->release == nullptr)
    throw nb::value_error((std::string("the ") + name + " capsule was already consumed").c_str());
  return pointer;
}

/// A view of `count` elements of `type` at `data`, kept alive by `owner`.
nb::object array_view(const void* data, std::size_t count, nb::dlpack::dtype type,
                      nb::handle owner) {
  static const std::uint8_t kEmpty[8] = {};
  const std::size_t shape[1] = {count};
  return nb::cast(nb::ndarray<nb::numpy, nb::ro, nb::ndim<1>>(data == nullptr ? kEmpty : data, 1,
                                                              shape, owner, nullptr, type));
}

/// A new array of `count` elements of T that numpy owns.
template <typename T>
std::pair<nb::object, T*> new_array(std::size_t count) {
  T* data = new T[count == 0 ? 1 : count];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  const std::size_t shape[1] = {count};
  return {nb::cast(nb::ndarray<nb::numpy, T, nb::ndim<1>>(data, 1, shape, owner)), data};
}

/// An ArrowArray or ArrowArrayStream moved out of its producer's capsule (whose release member
/// is set to null, so that the capsule no longer releases it), released when this is destroyed.
template <typename Struct>
struct Owned {
  explicit Owned(Struct* source) : value(*source) { source->release = nullptr; }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (value.release != nullptr) value.release(&value);
  }

  Struct value;
};

/// One Arrow array of keys, owned (moved out of its capsule or stream): released with the chunk.
class ArrowChunk {
 public:
  ArrowChunk(const KeyFormat& format, ArrowArray* source) : format_(format), owned_(source) {
    const ArrowArray& array = owned_.value;
    if (format_.one_column) {
      if (array.n_children != 1 || array.children == nullptr)
        throw nb::value_error("an Arrow record batch without its one column");
      table_ = &array;
      column_ = array.children[0];
    } else {
      column_ = &array;
    }
    if (array.length < 0 || array.offset < 0 || column_->offset < 0 ||
        column_->length < array.length + (table_ == nullptr ? 0 : array.offset))
      throw nb::value_error("an Arrow array with a negative or inconsistent length or offset");
    // A struct's offset applies to its children too.
    offset_ = static_cast<std::size_t>(column_->offset + (table_ == nullptr ? 0 : array.offset));
    length_ = static_cast<std::size_t>(array.length);
    const std::int64_t buffers = column_->n_buffers;
    const bool enough = format_.layout == KeyLayout::views
                            ? buffers >= 3
                            : buffers >= (format_.layout == KeyLayout::offsets32 ||
                                                  format_.layout == KeyLayout::offsets64
                                              ? 3
                                              : 2);
    if (!enough)
      throw nb::value_error(("an Arrow array of keys with " + std::to_string(buffers) +
                             " buffers, fewer than its type has")
                                .c_str());
    if (length_ > 0 && column_->buffers[1] == nullptr && format_.layout != KeyLayout::offsets32 &&
        format_.layout != KeyLayout::offsets64)
      throw nb::value_error("an Arrow array of keys without its values buffer");
  }

  std::size_t size() const { return length_; }

  /// "integers", "offsets" (one piece, in place) or "slices" (pieces of slice()).
  const char* layout() const {
    switch (format_.layout) {
      case KeyLayout::integers:
        return "integers";
      case KeyLayout::offsets32:
      case KeyLayout::offsets64:
        return "offsets";
      default:
        return "slices";
    }
  }

  /// The position of the first null, if any: a null key, or of a record batch a null row.
  std::optional<std::size_t> first_null() const {
    const std::optional<std::size_t> key = first_null_in(*column_, offset_);
    if (table_ == nullptr) return key;
    const std::optional<std::size_t> row = first_null_in(*table_, table_->offset);
    if (!row || !key) return row ? row : key;
    return std::min(*row, *key);
  }

  /// Integer keys: a view of the values.
  nb::object integers(nb::handle owner) const {
    require(KeyLayout::integers);
    const auto* values = static_cast<const std::uint8_t*>(column_->buffers[1]);
    return array_view(values == nullptr ? nullptr : values + offset_ * format_.width, size(),
                      format_.integer_type, owner);
  }

  /// String or binary keys: views of the offsets (of this array's keys) and of the bytes.
  std::tuple<nb::object, nb::object> offsets_and_data(nb::handle owner) const {
    const bool wide = format_.layout == KeyLayout::offsets64;
    if (!wide) require(KeyLayout::offsets32);
    const std::size_t offset_size = wide ? 8 : 4;
    const auto* offsets = static_cast<const std::uint8_t*>(column_->buffers[1]);
    if (offsets == nullptr) {  // an empty array may come without offsets
      if (size() != 0) throw nb::value_error("an Arrow string array without offsets");
      static const std::int64_t kZero = 0;
      return {array_view(&kZero, 1, nb::dtype<std::int64_t>(), owner),
              array_view(nullptr, 0, nb::dtype<std::uint8_t>(), owner)};
    }
    const std::uint8_t* first = offsets + offset_ * offset_size;
    std::int64_t last = 0;  // the end of the last key: as many bytes of data are read
    if (wide) {
      std::memcpy(&last, first + size() * 8, 8);
    } else {
      std::int32_t last32 = 0;
      std::memcpy(&last32, first + size() * 4, 4);
      last = last32;
    }
    if (last < 0) throw nb::value_error("an Arrow string array with a negative offset");
    if (last > 0 && column_->buffers[2] == nullptr)
      throw nb::value_error("an Arrow string array without its data buffer");
    return {array_view(first, size() + 1,
                       wide ? nb::dtype<std::int64_t>() : nb::dtype<std::int32_t>(), owner),
            array_view(column_->buffers[2], static_cast<std::size_t>(last),
                       nb::dtype<std::uint8_t>(), owner)};
  }

  /// Keys [begin, end) of a fixed-size binary or view array as int64 offsets and bytes: for
  /// fixed-size keys, offsets made for the slice over a view of its bytes; for views, both new.
  std::tuple<nb::object, nb::object> slice(std::size_t begin, std::size_t end,
                                           nb::handle owner) const {
    if (begin > end || end > size())
      throw nb::index_error(("slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                             ") of " + std::to_string(size()) + " keys")
                                .c_str());
    const std::size_t count = end - begin;
    auto [offsets_array, offsets] = new_array<std::int64_t>(count + 1);
    if (format_.layout == KeyLayout::fixed) {
      const std::size_t width = format_.width;
      for (std::size_t i = 0; i <= count; ++i) offsets[i] = static_cast<std::int64_t>(i * width);
      const auto* data = static_cast<const std::uint8_t*>(column_->buffers[1]);
      const std::uint8_t* from = data == nullptr ? nullptr : data + (offset_ + begin) * width;
      return {offsets_array, array_view(from, count * width, nb::dtype<std::uint8_t>(), owner)};
    }
    require(KeyLayout::views);
    std::size_t total = 0;
    offsets[0] = 0;
    for (std::size_t i = 0; i < count; ++i) {
      total += key_of_view(begin + i).size();
      offsets[i + 1] = static_cast<std::int64_t>(total);
    }
    auto [data_array, data] = new_array<std::uint8_t>(total);
    nb::gil_scoped_release release;
    for (std::size_t i = 0; i < count; ++i) {
      const std::string_view key = key_of_view(begin + i);
      std::memcpy(data + offsets[i], key.data(), key.size());
    }
    return {offsets_array, data_array};
  }

 private:
  void require(KeyLayout layout) const {
    if (format_.layout != layout) throw nb::type_error("this Arrow array has another layout");
  }

  /// Key i of a string/binary view array, checked against its data buffer's size.
  std::string_view key_of_view(std::size_t i) const {
    const auto* view = static_cast<const std::uint8_t*>(column_->buffers[1]) + (offset_ + i) * 16;
    std::int32_t length = 0;
    std::memcpy(&length, view, 4);
    if (length < 0) throw nb::value_error("an Arrow view with a negative length");
    if (length <= 12) return {reinterpret_cast<const char*>(view + 4), std::size_t(length)};
    std::int32_t buffer = 0;
    std::int32_t offset = 0;
    std::memcpy(&buffer, view + 8, 4);
    std::memcpy(&offset, view + 12, 4);
    // buffers: validity, views, the data buffers, then an int64 array of their sizes.
    const std::int64_t data_buffers = column_->n_buffers - 3;
    const auto* sizes = static_cast<const std::int64_t*>(column_->buffers[column_->n_buffers - 1]);
    if (buffer < 0 || buffer >= data_buffers || offset < 0 ||
        std::int64_t{offset} + length > sizes[buffer])
      throw nb::value_error(
          ("Arrow view " + std::to_string(i) + " points past its data buffer").c_str());
    const auto* data = static_cast<const char*>(column_->buffers[2 + buffer]);
    if (data == nullptr) throw nb::value_error("an Arrow view array without its data buffer");
    return {data + offset, std::size_t(length)};
  }

  /// The first of `length_` entries from `begin` whose validity bit in `array` is 0.
  std::optional<std::size_t> first_null_in(const ArrowArray& array, std::size_t begin) const {
    const auto* validity =
        array.n_buffers > 0 ? static_cast<const std::uint8_t*>(array.buffers[0]) : nullptr;
    if (array.null_count == 0 || validity == nullptr) return std::nullopt;
    const std::size_t end = begin + length_;
    for (std::size_t bit = begin; bit < end; ++bit) {
      if (bit % 8 == 0 && bit + 8 <= end && validity[bit / 8] == 0xFF) {
        bit += 7;  // a whole byte of valid entries
        continue;
      }
      if (((validity[bit / 8] >> (bit % 8)) & 1) == 0) return bit - begin;
    }
    return std::nullopt;
  }

  KeyFormat format_;
  Owned<ArrowArray> owned_;
  const ArrowArray* table_ = nullptr;   // the record batch whose only column the keys are
  const ArrowArray* column_ = nullptr;  // the keys' array
  std::size_t offset_ = 0;              // of the first key in column_'s buffers
  std::size_t length_ = 0;
};

/// The chunks of an Arrow stream of keys (moved out of its capsule), read one at a time.
class ArrowStream {
 public:
  explicit ArrowStream(nb::handle capsule)
      : owned_(capsule_pointer<ArrowArrayStream>(capsule, "arrow_array_stream")) {
    ArrowSchema schema{};
    check(stream_.get_schema(&stream_, &schema));
    std::unique_ptr<ArrowSchema, void (*)(ArrowSchema*)> owned(&schema, [](ArrowSchema* s) {
      if (s->release != nullptr) s->release(s);
    });
    format_ = key_format(schema);
  }

  /// The next chunk, or nullptr at the end of the stream.
  ArrowChunk* next() {
    ArrowArray array{};
    check(stream_.get_next(&stream_, &array));
    if (array.release == nullptr) return nullptr;
    return new ArrowChunk(format_, &array);
  }

 private:
  void check(int code) {
    if (code == 0) return;
    const char* message =
        stream_.get_last_error == nullptr ? nullptr : stream_.get_last_error(&stream_);
    throw std::runtime_error("reading the keys' Arrow stream failed: " +
                             std::string(message == nullptr ? std::strerror(code) : message));
  }

  Owned<ArrowArrayStream> owned_;
  ArrowArrayStream& stream_ = owned_.value;
  KeyFormat format_;
};

}  // namespace

void bind_arrow(nb::module_& m) {
  nb::class_<ArrowChunk>(m, "ArrowChunk",
                         "One Arrow array of keys taken from its producer, read in place.")
      .def_static(
          "from_capsules",
          [](nb::handle schema, nb::handle array) {
            const KeyFormat format =
                key_format(*capsule_pointer<ArrowSchema>(schema, "arrow_schema"));
            return new ArrowChunk(format, capsule_pointer<ArrowArray>(array, "arrow_array"));
          },
          nb::arg("schema"), nb::arg("array"), nb::rv_policy::take_ownership,
          "Takes the array of an (ArrowSchema, ArrowArray) capsule pair from __arrow_c_array__.")
      .def("__len__", &ArrowChunk::size)
      .def_prop_ro("layout", &ArrowChunk::layout,
                   "\"integers\", \"offsets\" (in place) or \"slices\" (read with slice()).")
      .def("first_null", &ArrowChunk::first_null, "The position of the first null, or None.")
      .def(
          "integers", [](ArrowChunk& self) { return self.integers(nb::find(&self)); },
          "Integer keys: a read-only numpy view of the values.")
      .def(
          "offsets_and_data",
          [](ArrowChunk& self) { return self.offsets_and_data(nb::find(&self)); },
          "String or binary keys: read-only views of their offsets and bytes.")
      .def(
          "slice",
          [](ArrowChunk& self, std::size_t begin, std::size_t end) {
            return self.slice(begin, end, nb::find(&self));
          },
          nb::arg("begin"), nb::arg("end"),
          "Keys [begin, end) of a fixed-size binary or view array as int64 offsets and bytes.");
  nb::class_<ArrowStream>(m, "ArrowStream", "The chunks of an Arrow stream of keys.")
      .def(nb::init<nb::handle>(), nb::arg("capsule"),
           "Takes the stream of an __arrow_c_stream__ capsule.")
      .def("__iter__", [](nb::handle self) { return self; })
      .def(
          "__next__",
          [](ArrowStream& self) {
            ArrowChunk* chunk = self.next();
            if (chunk == nullptr) throw nb::stop_iteration();
            return chunk;
          },
          nb::rv_policy::take_ownership);
}

}  // namespace bulkbloom::python
