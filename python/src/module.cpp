// The bulkbloom._core extension: exception types, the shared helpers, and the module itself.
// The public Python API (bulkbloom/__init__.py) turns numpy, Arrow, buffer and DLPack inputs
// into the plain arrays these bindings take.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <bulkbloom/error.hpp>
#include <bulkbloom/format.hpp>

#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "persist/temporary_output.hpp"

namespace bulkbloom::python {

Options make_options(const std::string& backend, const std::string& implementation,
                     unsigned threads) {
  Options options;
  options.backend = parse_backend(backend);
  options.implementation = implementation;
  options.threads = threads;
  return options;
}

MapOptions make_map_options(bool verify, const std::string& implementation, unsigned threads) {
  MapOptions map_options;
  map_options.verify = verify;
  map_options.options = make_options("cpu", implementation, threads);
  return map_options;
}

Layout make_layout(const std::string& shape, std::uint64_t num_blocks, const std::string& hash,
                   std::uint64_t seed, const std::string& index) {
  Layout layout;
  layout.shape = parse_shape(shape);
  layout.num_blocks = num_blocks;
  if (hash == "xxh64") {
    layout.hash = KeyHash::xxh64;
  } else if (hash == "identity") {
    layout.hash = KeyHash::identity;
  } else {
    throw std::invalid_argument("hash must be \"xxh64\" or \"identity\", not \"" + hash + "\"");
  }
  layout.seed = seed;
  layout.index = parse_block_index(index);
  layout.validate();
  return layout;
}

nb::dict layout_dict(const Layout& layout) {
  nb::dict d;
  d["shape"] = std::string(to_string(layout.shape));
  d["num_blocks"] = layout.num_blocks;
  d["hash"] = layout.hash == KeyHash::xxh64 ? "xxh64" : "identity";
  d["seed"] = layout.seed;
  d["index"] = std::string(to_string(layout.index));
  d["size_bytes"] = layout.size_bytes();
  d["description"] = layout.describe();
  return d;
}

FileState file_state(std::uint64_t keys_inserted, const nb::bytes& metadata) {
  FileState state;
  state.keys_inserted = keys_inserted;
  const auto* begin = static_cast<const std::byte*>(metadata.data());
  state.metadata.assign(begin, begin + metadata.size());
  return state;
}

nb::bytes to_bytes(std::span<const std::byte> bytes) {
  return nb::bytes(bytes.data(), bytes.size());
}

void require_length(const FlagArray& out, std::size_t count, const char* what) {
  if (out.shape(0) != count)
    throw std::invalid_argument(std::string(what) + ": the output has " +
                                std::to_string(out.shape(0)) + " elements for " +
                                std::to_string(count) + " keys");
}

ArrowByteKeys ArrowByteKeys::fixed(const std::uint8_t* values, std::size_t count,
                                   std::size_t width) {
  ArrowByteKeys keys;
  keys.values_ = values;
  keys.count_ = count;
  keys.width_ = width;
  return keys;
}

ArrowByteKeys ArrowByteKeys::views(const std::uint8_t* views, std::size_t count,
                                   std::vector<const char*> buffers,
                                   std::vector<std::int64_t> sizes) {
  ArrowByteKeys keys;
  keys.values_ = views;
  keys.count_ = count;
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    keys.bases_.push_back(reinterpret_cast<std::uintptr_t>(buffers[b]));
    keys.limits_.push_back(buffers[b] == nullptr ? -1 : sizes[b]);
  }
  keys.bases_.push_back(0);
  keys.limits_.push_back(-1);
  keys.sizes_ = std::move(sizes);
  return keys;
}

void ArrowByteKeys::check(std::size_t i) const {
  if (width_ != 0) return;
  const View v = view(i);
  if (v.length < 0)
    throw std::invalid_argument("Arrow view " + std::to_string(i) + " has a negative length (" +
                                std::to_string(v.length) + ")");
  if (v.length <= kInlineSize) return;
  const auto where = [&] {
    return "Arrow view " + std::to_string(i) + " (" + std::to_string(v.length) +
           " bytes at offset " + std::to_string(v.offset) + " of data buffer " +
           std::to_string(v.buffer) + ")";
  };
  if (v.buffer < 0 || static_cast<std::size_t>(v.buffer) >= sizes_.size())
    throw std::invalid_argument(where() + " names a buffer the array does not have (it has " +
                                std::to_string(sizes_.size()) + ")");
  const auto buffer = static_cast<std::size_t>(v.buffer);
  const std::int64_t available = sizes_[buffer];
  if (v.offset < 0 || std::int64_t{v.offset} + v.length > available || bases_[buffer] == 0)
    throw std::invalid_argument(where() + " is not inside that buffer's " +
                                std::to_string(available) + " bytes");
}

ByteKeys::ByteKeys(const KeyOffsets& offsets, const KeyData& data) {
  if (const auto* arrow = std::get_if<const ArrowByteKeys*>(&offsets)) {
    if (data) throw std::invalid_argument("byte-string keys of an Arrow array take no data");
    arrow_ = *arrow;
    count_ = arrow_->size();
    return;
  }
  const OffsetArray& array = std::get<OffsetArray>(offsets);
  if (!data) throw std::invalid_argument("byte-string offsets need their data");
  wide_ = array.dtype() == nb::dtype<std::int64_t>();
  if (!wide_ && array.dtype() != nb::dtype<std::int32_t>())
    throw std::invalid_argument("byte-string offsets must be int32 or int64");
  if (array.shape(0) == 0) throw std::invalid_argument("byte-string offsets are empty");
  offsets_ = array.data();
  count_ = array.shape(0) - 1;
  data_ = reinterpret_cast<const char*>(data->data());
  data_size_ = data->shape(0);
}

std::uint64_t ByteKeys::offset(std::size_t i) const {
  return wide_ ? static_cast<std::uint64_t>(static_cast<const std::int64_t*>(offsets_)[i])
               : static_cast<std::uint64_t>(static_cast<const std::int32_t*>(offsets_)[i]);
}

void ByteKeys::validate() const {
  if (arrow_ != nullptr) return arrow_->validate();
  // A negative offset becomes a huge unsigned one, so one comparison catches it too.
  for (std::size_t i = 0; i <= count_; ++i) {
    const std::uint64_t at = offset(i);
    if (at > data_size_ || (i > 0 && at < offset(i - 1)))
      throw std::invalid_argument("byte-string offset " + std::to_string(i) +
                                  " is out of order or past the data (" +
                                  std::to_string(data_size_) + " bytes)");
  }
}

std::span<const std::string_view> ByteKeys::chunk(std::size_t begin, std::size_t end) {
  views_.resize(end - begin);
  if (arrow_ != nullptr) {
    arrow_->keys(begin, end, views_.data());
    return views_;
  }
  if (wide_) {
    offset_keys(static_cast<const std::int64_t*>(offsets_), begin, end);
  } else {
    offset_keys(static_cast<const std::int32_t*>(offsets_), begin, end);
  }
  return views_;
}

template <typename Offset>
void ByteKeys::offset_keys(const Offset* offsets, std::size_t begin, std::size_t end) {
  // Each offset is read once, and the offsets' width is chosen once for the chunk.
  auto from = static_cast<std::uint64_t>(offsets[begin]);
  for (std::size_t i = begin; i < end; ++i) {
    const auto to = static_cast<std::uint64_t>(offsets[i + 1]);
    views_[i - begin] = std::string_view(data_ + from, to - from);
    from = to;
  }
}

namespace {

// The library's messages name its C++ readers of a shard's file (the command line shows them too);
// a Python user reads one with the shard classes' methods.
std::string with_python_names(std::string message) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"(load_shard, map_shard)", "(bulkbloom.FilterShard.load, .map or .from_bytes)"},
      {"load_window_shard()", "bulkbloom.WindowShard.load or .from_bytes"},
      {"GrownFilter::load()", "bulkbloom.GrownFilter.load or bulkbloom.load"},
      {"which load() reads", "which bulkbloom.Filter.load or bulkbloom.load reads"},
      {"load_window()", "bulkbloom.WindowedFilter.load or bulkbloom.load"},
  };
  for (const auto& [cpp, python] : kNames) {
    if (const auto at = message.find(cpp); at != std::string::npos)
      message.replace(at, cpp.size(), python);
  }
  return message;
}

// Raises `e` as bulkbloom.IoError (`io_error`), made as OSError(errno, message) with its
// filename, so that errno, strerror and filename read as on Python's own I/O errors. Where Python
// maps the errno to an OSError subclass (FileNotFoundError, PermissionError, ...), the type is
// IoError's subclass for it, IoError.FileNotFoundError and so on (made in __init__.py), so that
// `except FileNotFoundError` catches a missing file.
void raise_io_error(PyObject* io_error, const IoError& e) {
  if (e.error_number() == 0) {
    PyErr_SetString(io_error, e.what());
    return;
  }
  // Python's own choice of subclass for this errno, from the OSError constructor.
  PyObject* probe = PyObject_CallFunction(PyExc_OSError, "is", e.error_number(), "");
  if (probe == nullptr) return;
  PyObject* type = PyObject_GetAttrString(io_error, Py_TYPE(probe)->tp_name);
  Py_DECREF(probe);
  if (type == nullptr) {  // OSError itself, or a subclass IoError has none for
    PyErr_Clear();
    type = Py_NewRef(io_error);
  }
  PyObject* error = PyObject_CallFunction(type, "is", e.error_number(), e.what());
  if (error != nullptr && !e.path().empty()) {
    PyObject* filename = PyUnicode_DecodeFSDefault(e.path().c_str());
    if (filename == nullptr || PyObject_SetAttrString(error, "filename", filename) != 0) {
      Py_CLEAR(error);
    }
    Py_XDECREF(filename);
  }
  if (error != nullptr) {
    PyErr_SetObject(type, error);
    Py_DECREF(error);
  }
  Py_DECREF(type);
}

void translate_exception(const std::exception_ptr& p, void* payload) {
  auto* types = static_cast<PyObject**>(payload);
  try {
    std::rethrow_exception(p);
  } catch (const FormatError& e) {
    PyErr_SetString(types[0], with_python_names(e.what()).c_str());
  } catch (const IoError& e) {
    raise_io_error(types[1], e);
  } catch (const BackendUnavailable& e) {
    PyErr_SetString(types[2], e.what());
  } catch (const AllocationError& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
  } catch (const Error& e) {
    PyErr_SetString(types[3], e.what());
  }
}

}  // namespace

}  // namespace bulkbloom::python

NB_MODULE(_core, m) {
  namespace nb = nanobind;
  using namespace bulkbloom::python;
  m.doc() = "bulkbloom's C++ core; use the bulkbloom package, not this module.";

  // Exception types: Error is the base; FormatError is also a ValueError, IoError an OSError.
  static PyObject* types[4];
  types[3] = PyErr_NewExceptionWithDoc("bulkbloom.Error", "Base of bulkbloom's own errors.",
                                       PyExc_Exception, nullptr);
  nb::object format_bases = nb::make_tuple(nb::handle(types[3]), nb::handle(PyExc_ValueError));
  types[0] = PyErr_NewExceptionWithDoc(
      "bulkbloom.FormatError",
      "A file or byte image is not a valid bulkbloom filter (truncated, corrupt, wrong magic, "
      "newer version, ...).",
      format_bases.ptr(), nullptr);
  nb::object io_bases = nb::make_tuple(nb::handle(types[3]), nb::handle(PyExc_OSError));
  types[1] = PyErr_NewExceptionWithDoc("bulkbloom.IoError",
                                       "An operating-system I/O call failed; the message names "
                                       "the path, the call and the reason.",
                                       io_bases.ptr(), nullptr);
  types[2] = PyErr_NewExceptionWithDoc(
      "bulkbloom.BackendUnavailable",
      "The requested backend or implementation is not available in this build or machine.",
      types[3], nullptr);
  m.attr("Error") = nb::handle(types[3]);
  m.attr("FormatError") = nb::handle(types[0]);
  m.attr("IoError") = nb::handle(types[1]);
  m.attr("BackendUnavailable") = nb::handle(types[2]);
  nb::register_exception_translator(translate_exception, types);

  m.def("available_implementations", &bulkbloom::available_implementations,
        "Names of every CPU implementation this build can run on this machine, best first.");
  m.attr("chunk_keys") = kChunkKeys;
  // The command line's names and rule for staged outputs, so that each removes the other's. The
  // stem comes back as a path, not a str: a name that is not UTF-8 then round-trips as os.fsdecode
  // gives it.
  m.def(
      "temporary_output_stem",
      [](const std::filesystem::path& output) {
        return std::filesystem::path(bulkbloom::detail::temporary_output_stem(output));
      },
      nb::arg("output"),
      "The start of the temporary names of ``output``: ``DIR/.NAME.bulkbloom-``; a run adds its "
      "pid, '-' and six characters, and holds an exclusive flock on the file until its rename.");
  m.def("remove_dead_temporary_outputs", &bulkbloom::detail::remove_dead_temporary_outputs,
        nb::arg("output"),
        "Removes the temporary outputs of ``output`` that runs left without renaming them: those "
        "whose pid is gone, and those whose lock is free and whose last change is older than the "
        "grace period (docs/FORMAT.md).");

  bind_filter(m);
  bind_window(m);
  bind_shard(m);
  bind_window_shard(m);
  bind_arrow(m);
  bind_grown(m);
}
