// State directories (docs/FORMAT.md "State directories"): a state kept as files written once, the
// open part as a base and logs, and a manifest that names them, replaced atomically last.
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "bulkbloom/incremental.hpp"
#include "persist/file_io.hpp"

namespace bulkbloom {
namespace {

using detail::DataChecksum;
using detail::File;
using detail::get;
using detail::put;

constexpr const char* kManifestFile = "MANIFEST";
constexpr std::byte kManifestMagic[8] = {std::byte{0x89}, std::byte{'B'}, std::byte{'B'},
                                         std::byte{'S'},  std::byte{'T'}, std::byte{'A'},
                                         std::byte{'T'},  std::byte{'\n'}};
constexpr std::uint32_t kManifestVersion = 1;
constexpr std::uint64_t kManifestHeadBytes = 40;

// What a state directory holds, as its manifest stores it.
enum Kind : std::uint32_t {
  kWindow = static_cast<std::uint32_t>(StateDirectory::Kind::window),
  kWindowShard = static_cast<std::uint32_t>(StateDirectory::Kind::window_shard),
  kGrown = static_cast<std::uint32_t>(StateDirectory::Kind::grown),
};

const char* kind_name(std::uint32_t kind) {
  switch (kind) {
    case kWindow:
      return "a window";
    case kWindowShard:
      return "a window shard";
    case kGrown:
      return "a grown filter";
    default:
      return "an unknown kind of state";
  }
}

std::uint64_t checksum_of(std::span<const std::byte> bytes) {
  DataChecksum checksum;
  checksum.update(bytes);
  return checksum.digest();
}

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

}  // namespace

namespace detail {

// A file of the state: its name in the directory (empty: all-zero bits, no file), its length and
// the XXH3-64 of its bytes.
struct StateFile {
  std::string name;
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;
};

struct StateManifest {
  std::uint32_t kind = 0;
  std::uint64_t sequence = 0;
  std::vector<std::byte> metadata;
  std::vector<PartId> parts;     // from the metadata
  std::vector<StateFile> files;  // one per part; the open part's is its base
  std::vector<StateFile> logs;   // the open part's logs since its base, in order
  std::uint64_t log_bytes() const {
    std::uint64_t total = 0;
    for (const StateFile& log : logs) total += log.bytes;
    return total;
  }
};

}  // namespace detail

namespace {

using detail::StateFile;
using Manifest = detail::StateManifest;

constexpr std::uint64_t kEntryBytes = 18;  // bytes, checksum, name length; then the name

// The manifest's bytes: magic, version, kind, sequence, the snapshot's metadata, the file of
// each part, the logs, and the XXH3-64 of all before it.
std::vector<std::byte> encode_manifest(const Manifest& m) {
  std::uint64_t size = kManifestHeadBytes + m.metadata.size() + 8;
  for (const auto* list : {&m.files, &m.logs}) {
    for (const StateFile& file : *list) size += kEntryBytes + file.name.size();
  }
  std::vector<std::byte> out(size);
  std::byte* p = out.data();
  std::memcpy(p, kManifestMagic, 8);
  put(p, 8, kManifestVersion);
  put(p, 12, m.kind);
  put(p, 16, m.sequence);
  put(p, 24, static_cast<std::uint64_t>(m.metadata.size()));
  put(p, 32, static_cast<std::uint32_t>(m.files.size()));
  put(p, 36, static_cast<std::uint32_t>(m.logs.size()));
  std::uint64_t at = kManifestHeadBytes;
  std::copy(m.metadata.begin(), m.metadata.end(), p + at);
  at += m.metadata.size();
  for (const auto* list : {&m.files, &m.logs}) {
    for (const StateFile& file : *list) {
      put(p, at, file.bytes);
      put(p, at + 8, file.checksum);
      put(p, at + 16, static_cast<std::uint16_t>(file.name.size()));
      std::memcpy(p + at + kEntryBytes, file.name.data(), file.name.size());
      at += kEntryBytes + file.name.size();
    }
  }
  put(p, at, checksum_of(std::span(out).first(at)));
  return out;
}

Manifest decode_manifest(std::span<const std::byte> bytes, const std::string& source) {
  const auto fail = [&](const std::string& problem) {
    return detail::format_error(source, problem);
  };
  if (bytes.size() < kManifestHeadBytes + 8 || std::memcmp(bytes.data(), kManifestMagic, 8) != 0) {
    throw fail("not a bulkbloom state manifest (bad magic bytes or too short)");
  }
  if (checksum_of(bytes.first(bytes.size() - 8)) !=
      get<std::uint64_t>(bytes.data(), bytes.size() - 8)) {
    throw fail("checksum mismatch: the manifest is corrupt");
  }
  if (const auto version = get<std::uint32_t>(bytes.data(), 8); version != kManifestVersion) {
    throw fail("state manifest version " + std::to_string(version) +
               " is not supported: this bulkbloom reads version 1");
  }
  Manifest m;
  m.kind = get<std::uint32_t>(bytes.data(), 12);
  m.sequence = get<std::uint64_t>(bytes.data(), 16);
  const auto metadata_bytes = get<std::uint64_t>(bytes.data(), 24);
  const auto files = get<std::uint32_t>(bytes.data(), 32);
  const auto logs = get<std::uint32_t>(bytes.data(), 36);
  std::uint64_t at = kManifestHeadBytes;
  const std::uint64_t end = bytes.size() - 8;
  if (metadata_bytes > end - at) throw fail("the metadata does not fit in the manifest");
  m.metadata.assign(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                    bytes.begin() + static_cast<std::ptrdiff_t>(at + metadata_bytes));
  at += metadata_bytes;
  const auto read_file = [&] {
    if (end - at < kEntryBytes) throw fail("truncated file list");
    StateFile file{
        {}, get<std::uint64_t>(bytes.data(), at), get<std::uint64_t>(bytes.data(), at + 8)};
    const auto name_bytes = get<std::uint16_t>(bytes.data(), at + 16);
    at += kEntryBytes;
    if (end - at < name_bytes) throw fail("truncated file list");
    file.name.assign(reinterpret_cast<const char*>(bytes.data() + at), name_bytes);
    at += name_bytes;
    if (file.name.find('/') != std::string::npos || file.name == "." || file.name == "..") {
      throw fail("file name '" + file.name + "' is not a name in the directory");
    }
    return file;
  };
  for (std::uint32_t i = 0; i < files; ++i) m.files.push_back(read_file());
  for (std::uint32_t i = 0; i < logs; ++i) m.logs.push_back(read_file());
  if (at != end) throw fail(std::to_string(end - at) + " unexpected bytes after the file list");
  m.parts = snapshot_parts(m.metadata, source);
  if (m.parts.size() != m.files.size()) {
    throw fail("its metadata describes " + std::to_string(m.parts.size()) + " parts, it names " +
               std::to_string(m.files.size()) + " files");
  }
  for (const StateFile& log : m.logs) {
    if (log.bytes % 8 != 0 || log.name.empty())
      throw fail("log file " + log.name + " is malformed");
  }
  return m;
}

// Reads file `file` of `dir` into `out` (exactly its length), verified; an unnamed file is
// all-zero bits.
void read_state_file(const std::filesystem::path& dir, const StateFile& file,
                     std::span<std::byte> out) {
  if (file.name.empty()) {
    std::fill(out.begin(), out.end(), std::byte{0});
    return;
  }
  const std::filesystem::path path = dir / file.name;
  if (out.size() != file.bytes) {
    throw FormatError(path.string() + ": the manifest records " + std::to_string(file.bytes) +
                      " bytes, the part it holds has " + std::to_string(out.size()));
  }
  const File in(path, O_RDONLY);
  if (const std::uint64_t size = in.regular_file_size(); size != file.bytes) {
    throw FormatError(path.string() + ": " + std::to_string(size) +
                      " bytes, the manifest records " + std::to_string(file.bytes));
  }
  in.read_exactly(out.data(), out.size(), 0);
  if (checksum_of(out) != file.checksum) {
    throw FormatError(path.string() + ": checksum mismatch: the file is corrupt");
  }
}

// Writes `bytes` as file `name` of `dir`, atomically (write, flush, rename, flush the directory).
StateFile write_state_file(const std::filesystem::path& dir, const std::string& name,
                           std::span<const std::byte> bytes) {
  detail::write_file_atomically(dir / name, [&](File& out) { out.write_all(bytes); });
  return {name, bytes.size(), checksum_of(bytes)};
}

// A part's bits as a file named `name`, or as no file when they are all zero.
StateFile part_file(const std::filesystem::path& dir, const std::string& name,
                    std::span<const std::byte> bits) {
  if (all_zero(bits)) return {{}, bits.size(), 0};
  return write_state_file(dir, name, bits);
}

// Whether `file` (of a committed manifest) holds `bits`.
bool holds(const StateFile& file, std::span<const std::byte> bits) {
  if (file.bytes != bits.size()) return false;
  return file.name.empty() ? all_zero(bits) : file.checksum == checksum_of(bits);
}

bool is_state_file(const std::string& name) {
  return name.ends_with(".part") || name.ends_with(".base") || name.ends_with(".log");
}

// The temporary file of a save of the manifest or of a state file, which only a failed or
// killed save leaves behind.
bool is_state_temp(const std::string& name) {
  return name.find(".tmp.") != std::string::npos &&
         (name.starts_with(kManifestFile) || is_state_file(name.substr(0, name.find(".tmp."))));
}

// Removes the files of `dir` that `committed` does not name (all of its own when null): those
// of earlier commits and of saves that failed. Best effort: what stays is removed after a later
// commit.
void remove_unnamed(const std::filesystem::path& dir, const Manifest* committed) {
  std::vector<std::string> named;
  if (committed != nullptr) {
    for (const StateFile& f : committed->files) named.push_back(f.name);
    for (const StateFile& f : committed->logs) named.push_back(f.name);
  }
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (is_state_temp(name) ||
        (is_state_file(name) && std::ranges::find(named, name) == named.end())) {
      std::filesystem::remove(entry.path(), error);
    }
  }
}

}  // namespace

StateDirectory::StateDirectory(std::filesystem::path dir) : dir_(std::move(dir)) {}
StateDirectory::StateDirectory(StateDirectory&&) noexcept = default;
StateDirectory& StateDirectory::operator=(StateDirectory&&) noexcept = default;
StateDirectory::~StateDirectory() = default;

bool StateDirectory::holds_state(const std::filesystem::path& dir) {
  return detail::find_checkpoint_file(dir, kManifestFile).has_value();
}

bool StateDirectory::holds_other_files(const std::filesystem::path& dir) {
  if (holds_state(dir) || !std::filesystem::exists(dir)) return false;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!is_state_file(name) && !is_state_temp(name)) return true;
  }
  if (error) {
    throw IoError("cannot list " + dir.string() + ": " + error.message(), error.value(), dir);
  }
  return false;
}

StateDirectory::Kind StateDirectory::stored_kind() const {
  return static_cast<Kind>(read_manifest(0).kind);
}

void StateDirectory::remove_uncommitted() const {
  if (!std::filesystem::is_directory(dir_)) return;
  if (!holds_state(dir_)) {
    remove_unnamed(dir_, nullptr);
    return;
  }
  const Manifest committed = read_manifest(0);
  remove_unnamed(dir_, &committed);
}

// The committed manifest, verified, of state kind `kind` (any kind: 0).
detail::StateManifest StateDirectory::read_manifest(std::uint32_t kind) const {
  const std::filesystem::path path = dir_ / kManifestFile;
  const File in(path, O_RDONLY);
  std::vector<std::byte> bytes(in.regular_file_size());
  in.read_exactly(bytes.data(), bytes.size(), 0);
  Manifest m = decode_manifest(bytes, path.string());
  if (kind != 0 && m.kind != kind) {
    throw FormatError(path.string() + ": holds " + kind_name(m.kind) + ", not " + kind_name(kind));
  }
  return m;
}

std::uint64_t StateDirectory::commit(
    StateSnapshot snapshot, std::uint32_t kind,
    const std::function<void(std::size_t, const PartSink&)>& bits_of) {
  const bool synced = std::exchange(synced_, false);  // until this commit is through
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) {
    throw IoError("cannot create state directory " + dir_.string() + ": " + error.message(),
                  error.value(), dir_);
  }
  if (!committed_ && holds_state(dir_)) {
    try {
      committed_ = std::make_unique<Manifest>(read_manifest(kind));
    } catch (const FormatError&) {
      // A damaged or foreign manifest: this save replaces it, reusing none of its files.
    }
  }
  const Manifest* before = committed_.get();
  Manifest next;
  next.kind = kind;
  next.sequence = before != nullptr ? before->sequence + 1 : 1;
  next.metadata = std::move(snapshot.metadata);
  next.parts = std::move(snapshot.parts);
  const std::string prefix = std::to_string(next.sequence) + "-";
  std::uint64_t written = 0;

  // The sealed parts: a part the committed state held sealed is the same file (checked by its
  // checksum when this object's log does not descend from the commit).
  std::map<std::string, const StateFile*> kept;
  if (before != nullptr) {
    for (std::size_t i = 0; i + 1 < before->parts.size(); ++i) {
      kept[before->parts[i].name()] = &before->files[i];
    }
  }
  const std::size_t open = next.parts.size() - 1;
  for (std::size_t i = 0; i < open; ++i) {
    const std::string name = next.parts[i].name();
    const auto found = kept.find(name);
    bits_of(i, [&](std::span<const std::byte> bits) {
      if (found != kept.end() && (synced || holds(*found->second, bits))) {
        next.files.push_back(*found->second);
        return;
      }
      next.files.push_back(part_file(dir_, prefix + name + ".part", bits));
      written += next.files.back().name.empty() ? 0 : bits.size();
    });
  }

  // The open part: the committed base and logs, plus this log, when they describe it; a zero
  // base and this log when it started empty since; else, or once the logs pass kBaseFraction of
  // its bytes, its bits as a new base.
  const PartId& id = next.parts[open];
  std::uint64_t part_bytes = 0;
  bits_of(open, [&](std::span<const std::byte> bits) { part_bytes = bits.size(); });
  std::optional<StateFile> base;
  if (synced && before != nullptr && before->parts.back() == id &&
      snapshot.change == OpenChange::since_taken) {
    base = before->files.back();
    next.logs = before->logs;
  } else if (snapshot.change == OpenChange::since_empty) {
    base = StateFile{{}, part_bytes, 0};
  }
  const std::uint64_t log_bytes = next.log_bytes() + snapshot.log.size() * sizeof(std::uint64_t);
  if (base && static_cast<double>(log_bytes) <= kBaseFraction * static_cast<double>(part_bytes)) {
    next.files.push_back(*base);
    if (!snapshot.log.empty()) {
      next.logs.push_back(write_state_file(dir_, prefix + id.name() + ".log",
                                           std::as_bytes(std::span(snapshot.log))));
      written += next.logs.back().bytes;
    }
  } else {
    next.logs.clear();
    bits_of(open, [&](std::span<const std::byte> bits) {
      next.files.push_back(part_file(dir_, prefix + id.name() + ".base", bits));
      written += next.files.back().name.empty() ? 0 : bits.size();
    });
  }

  const std::vector<std::byte> manifest = encode_manifest(next);
  detail::write_file_atomically(dir_ / kManifestFile, [&](File& out) { out.write_all(manifest); });
  written += manifest.size();
  committed_ = std::make_unique<Manifest>(std::move(next));
  synced_ = true;
  remove_unnamed(dir_, committed_.get());
  return written;
}

std::uint64_t StateDirectory::save(WindowedFilter& window, const FileState& state) {
  enable_change_log(window);
  return commit(take_snapshot(window, state), kWindow,
                [&](std::size_t i, const PartSink& sink) { with_part_bits(window, i, sink); });
}

std::uint64_t StateDirectory::save(WindowShard& shard, const FileState& state) {
  enable_change_log(shard);
  return commit(take_snapshot(shard, state), kWindowShard,
                [&](std::size_t i, const PartSink& sink) { with_part_bits(shard, i, sink); });
}

std::uint64_t StateDirectory::save(GrownFilter& filter,
                                   std::span<const std::byte> caller_metadata) {
  enable_change_log(filter);
  return commit(take_snapshot(filter, caller_metadata), kGrown,
                [&](std::size_t i, const PartSink& sink) { with_part_bits(filter, i, sink); });
}

namespace {

// Restores the state `manifest` names with `restore` (given the metadata and the fill), then
// replays its logs into it with `replay`.
template <typename Restore, typename Replay>
auto load_state(const std::filesystem::path& dir, const Manifest& manifest, Restore&& restore,
                Replay&& replay) {
  const std::string source = (dir / kManifestFile).string();
  auto state = restore(
      manifest.metadata,
      [&](std::size_t i, const PartId&, std::span<std::byte> bits) {
        read_state_file(dir, manifest.files[i], bits);
      },
      source);
  std::vector<std::uint64_t> log;
  for (const StateFile& file : manifest.logs) {
    log.resize(file.bytes / 8);
    read_state_file(dir, file, std::as_writable_bytes(std::span(log)));
    replay(state, log);
  }
  enable_change_log(state);
  return state;
}

// Loads with `load` the state of the manifest that `read` returns, and sets `committed` to that
// manifest. A reader without the writer's lock (info, query) can meet a commit between reading
// the manifest and the files it names, which the commit removes once it has replaced the
// manifest: then the manifest is new, and the load starts again from it.
template <typename Read, typename Load>
auto load_committed(Read&& read, Load&& load, std::unique_ptr<Manifest>& committed) {
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    Manifest m = read();
    try {
      auto state = load(m);
      committed = std::make_unique<Manifest>(std::move(m));
      return state;
    } catch (const Error&) {
      if (attempt == kAttempts || read().sequence == m.sequence) throw;
    }
  }
}

}  // namespace

WindowedFilter StateDirectory::load_window(FileState* state, const Options& options) {
  auto window = load_committed(
      [&] { return read_manifest(kWindow); },
      [&](const Manifest& m) {
        return load_state(
            dir_, m,
            [&](auto metadata, const PartFill& fill, const std::string& source) {
              return restore_window(metadata, fill, state, options, source);
            },
            [](WindowedFilter& w, std::span<const std::uint64_t> log) { replay_log(w, log); });
      },
      committed_);
  synced_ = true;
  return window;
}

WindowShard StateDirectory::load_window_shard(FileState* state, const Options& options) {
  auto shard = load_committed(
      [&] { return read_manifest(kWindowShard); },
      [&](const Manifest& m) {
        return load_state(
            dir_, m,
            [&](auto metadata, const PartFill& fill, const std::string& source) {
              return restore_window_shard(metadata, fill, state, options, source);
            },
            [](WindowShard& s, std::span<const std::uint64_t> log) { replay_log(s, log); });
      },
      committed_);
  synced_ = true;
  return shard;
}

GrownFilter StateDirectory::load_grown(std::vector<std::byte>* caller_metadata,
                                       const Options& options) {
  auto filter = load_committed(
      [&] { return read_manifest(kGrown); },
      [&](const Manifest& m) {
        return load_state(
            dir_, m,
            [&](auto metadata, const PartFill& fill, const std::string& source) {
              return restore_grown(metadata, fill, caller_metadata, options, source);
            },
            [](GrownFilter& f, std::span<const std::uint64_t> log) { replay_log(f, log); });
      },
      committed_);
  synced_ = true;
  return filter;
}

}  // namespace bulkbloom
