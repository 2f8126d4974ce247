// bulkbloom._core.ArrowChunk and ArrowStream: key batches from the Arrow PyCapsule interface
// (__arrow_c_array__ / __arrow_c_stream__), read in place through the C data interface's structs
// (arrow_c_data.hpp). Integer, string and binary columns reach the bulk calls as numpy views of
// the producer's buffers, fixed-size binary and string/binary views (whose strings lie in
// several buffers) as an ArrowByteKeys over them; all are owned by the chunk, so that no key
// becomes a Python object and no key is copied.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
    if (format_.layout == KeyLayout::fixed) {
      const auto* values = static_cast<const std::uint8_t*>(column_->buffers[1]);
      byte_keys_ = ArrowByteKeys::fixed(
          values == nullptr ? nullptr : values + offset_ * format_.width, length_, format_.width);
    } else if (format_.layout == KeyLayout::views) {
      byte_keys_ = view_keys();
    }
  }

  std::size_t size() const { return length_; }

  /// "integers" (integers()), "offsets" (offsets_and_data()) or "byte_keys" (byte_keys()).
  const char* layout() const {
    switch (format_.layout) {
      case KeyLayout::integers:
        return "integers";
      case KeyLayout::offsets32:
      case KeyLayout::offsets64:
        return "offsets";
      default:
        return "byte_keys";
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

  /// Fixed-size binary or view keys, read where they are.
  const ArrowByteKeys& byte_keys() const {
    if (format_.layout != KeyLayout::fixed) require(KeyLayout::views);
    return byte_keys_;
  }

 private:
  void require(KeyLayout layout) const {
    if (format_.layout != layout) throw nb::type_error("this Arrow array has another layout");
  }

  /// The keys of a view array: buffers are the validity bitmap, the views, the data buffers,
  /// then an int64 array of the data buffers' sizes.
  ArrowByteKeys view_keys() const {
    const auto* views = static_cast<const std::uint8_t*>(column_->buffers[1]);
    const auto count = static_cast<std::size_t>(column_->n_buffers - 3);
    const auto* sizes = static_cast<const std::int64_t*>(column_->buffers[column_->n_buffers - 1]);
    if (count > 0 && sizes == nullptr)
      throw nb::value_error("an Arrow view array without its data buffers' sizes");
    std::vector<const char*> buffers(count);
    for (std::size_t i = 0; i < count; ++i)
      buffers[i] = static_cast<const char*>(column_->buffers[2 + i]);
    return ArrowByteKeys::views(views == nullptr ? nullptr : views + offset_ * 16, length_,
                                std::move(buffers),
                                std::vector<std::int64_t>(sizes, sizes + count));
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
  ArrowByteKeys byte_keys_;  // fixed-size binary and view keys
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
      .def("byte_keys", &ArrowChunk::byte_keys, nb::rv_policy::reference_internal,
           "Fixed-size binary or view keys, read in place: what the *_bytes calls take with "
           "data None.");
  nb::class_<ArrowByteKeys>(m, "ArrowByteKeys",
                            "The keys of an Arrow fixed-size binary or view array, in place.")
      .def("__len__", &ArrowByteKeys::size)
      .def(
          "key",
          [](const ArrowByteKeys& self, std::size_t i) {
            if (i >= self.size())
              throw nb::index_error(
                  ("key " + std::to_string(i) + " of " + std::to_string(self.size())).c_str());
            self.check(i);
            const std::string_view key = self.key(i);
            return nb::bytes(key.data(), key.size());
          },
          nb::arg("i"), "Key i as bytes (its view checked first).");
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
