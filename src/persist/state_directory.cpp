// State directories (docs/FORMAT.md "State directories"): a state kept as files written once, the
// open part as a base and logs, and a manifest that names them, replaced atomically last.
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
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
constexpr std::uint32_t kManifestVersion = 2;
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
  std::vector<StateFile> files;  // one per part: its bits, or its base when it has logs
  // One per part: the XXH3-64 of the bits of a sealed part kept as a base and logs (so that a
  // save whose log does not continue this state can tell it did not change), else 0.
  std::vector<std::uint64_t> bits_checksums;
  std::vector<std::vector<StateFile>> logs;  // one list per part: its logs since its base, in order
  // The XXH3-64 that ends the manifest as stored (of a loaded one, as read: an older version's
  // encodes otherwise): tells whether the directory still holds this manifest.
  std::uint64_t stored_checksum = 0;
};

}  // namespace detail

namespace {

using detail::StateFile;
using Manifest = detail::StateManifest;

constexpr std::uint64_t kEntryBytes = 18;  // bytes, checksum, name length; then the name

// The manifest's bytes: magic, version, kind, sequence, the snapshot's metadata, each part's
// bits checksum and file, each log with the index of its part, and the XXH3-64 of all before it.
std::vector<std::byte> encode_manifest(const Manifest& m) {
  std::uint64_t size = kManifestHeadBytes + m.metadata.size() + 8;
  std::uint32_t log_count = 0;
  for (const StateFile& file : m.files) size += 8 + kEntryBytes + file.name.size();
  for (const std::vector<StateFile>& logs : m.logs) {
    for (const StateFile& log : logs) size += 4 + kEntryBytes + log.name.size();
    log_count += static_cast<std::uint32_t>(logs.size());
  }
  std::vector<std::byte> out(size);
  std::byte* p = out.data();
  std::memcpy(p, kManifestMagic, 8);
  put(p, 8, kManifestVersion);
  put(p, 12, m.kind);
  put(p, 16, m.sequence);
  put(p, 24, static_cast<std::uint64_t>(m.metadata.size()));
  put(p, 32, static_cast<std::uint32_t>(m.files.size()));
  put(p, 36, log_count);
  std::uint64_t at = kManifestHeadBytes;
  std::copy(m.metadata.begin(), m.metadata.end(), p + at);
  at += m.metadata.size();
  const auto put_file = [&](const StateFile& file) {
    put(p, at, file.bytes);
    put(p, at + 8, file.checksum);
    put(p, at + 16, static_cast<std::uint16_t>(file.name.size()));
    std::memcpy(p + at + kEntryBytes, file.name.data(), file.name.size());
    at += kEntryBytes + file.name.size();
  };
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    put(p, at, m.bits_checksums[i]);
    at += 8;
    put_file(m.files[i]);
  }
  for (std::size_t i = 0; i < m.logs.size(); ++i) {
    for (const StateFile& log : m.logs[i]) {
      put(p, at, static_cast<std::uint32_t>(i));
      at += 4;
      put_file(log);
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
  const auto version = get<std::uint32_t>(bytes.data(), 8);
  if (version != 1 && version != kManifestVersion) {
    throw fail("state manifest version " + std::to_string(version) +
               " is not supported: this bulkbloom reads versions 1 and 2");
  }
  Manifest m;
  m.stored_checksum = get<std::uint64_t>(bytes.data(), bytes.size() - 8);
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
  // Version 1: no bits checksums, and every log is the open part's.
  const auto read_u64 = [&] {
    if (end - at < 8) throw fail("truncated file list");
    at += 8;
    return get<std::uint64_t>(bytes.data(), at - 8);
  };
  const auto read_part_index = [&] {
    if (end - at < 4) throw fail("truncated file list");
    at += 4;
    const auto index = get<std::uint32_t>(bytes.data(), at - 4);
    if (index >= files) {
      throw fail("a log of part " + std::to_string(index) + " of " + std::to_string(files));
    }
    return index;
  };
  for (std::uint32_t i = 0; i < files; ++i) {
    m.bits_checksums.push_back(version == 1 ? 0 : read_u64());
    m.files.push_back(read_file());
  }
  m.logs.resize(files);
  for (std::uint32_t i = 0; i < logs; ++i) {
    if (files == 0) throw fail("logs but no part");
    const std::uint32_t part = version == 1 ? files - 1 : read_part_index();
    m.logs[part].push_back(read_file());
  }
  if (at != end) throw fail(std::to_string(end - at) + " unexpected bytes after the file list");
  m.parts = snapshot_parts(m.metadata, source);
  if (m.parts.size() != m.files.size()) {
    throw fail("its metadata describes " + std::to_string(m.parts.size()) + " parts, it names " +
               std::to_string(m.files.size()) + " files");
  }
  for (const std::vector<StateFile>& part_logs : m.logs) {
    for (const StateFile& log : part_logs) {
      if (log.bytes % 8 != 0 || log.name.empty())
        throw fail("log file " + log.name + " is malformed");
    }
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

// Whether `name` is one commit() gives a state file: "<sequence>-<part>.part|.base|.log", where
// <part> is PartId::name()'s "[u]p[m]<period>-<index>-b<blocks>". Only such names are the
// directory's own to remove: a directory a user names may hold other files ending alike
// (a --checkpoint directory full of logs).
bool is_state_file(std::string_view name) {
  const auto number = [&name] {
    const std::size_t digits = name.find_first_not_of("0123456789");
    if (digits == 0 || digits == std::string_view::npos) return false;
    name.remove_prefix(digits);
    return true;
  };
  const auto text = [&name](std::string_view expected) {
    if (!name.starts_with(expected)) return false;
    name.remove_prefix(expected.size());
    return true;
  };
  if (!number() || !text("-")) return false;
  text("u");
  if (!text("p")) return false;
  text("m");
  if (!number() || !text("-") || !number() || !text("-b") || !number()) return false;
  return name == ".part" || name == ".base" || name == ".log";
}

// The temporary file of a save of the manifest or of a state file, which only a failed or
// killed save leaves behind.
bool is_state_temp(std::string_view name) {
  const std::size_t temp = name.find(".tmp.");
  if (temp == std::string_view::npos) return false;
  const std::string_view saved = name.substr(0, temp);
  return saved == kManifestFile || is_state_file(saved);
}

// Removes the files of `dir` that `committed` does not name (all of its own when null): those
// of earlier commits and of saves that failed. Best effort: what stays is removed after a later
// commit.
void remove_unnamed(const std::filesystem::path& dir, const Manifest* committed) {
  std::vector<std::string> named;
  if (committed != nullptr) {
    for (const StateFile& f : committed->files) named.push_back(f.name);
    for (const std::vector<StateFile>& logs : committed->logs) {
      for (const StateFile& f : logs) named.push_back(f.name);
    }
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

// Whether `dir`'s manifest is still `committed` (its checksum; the next load verifies the rest).
bool manifest_on_disk_is(const std::filesystem::path& dir, const Manifest& committed) {
  if (!StateDirectory::holds_state(dir)) return false;
  const File in(dir / kManifestFile, O_RDONLY);
  const std::uint64_t size = in.regular_file_size();
  if (size < 8) return false;
  std::byte stored[8];
  in.read_exactly(stored, 8, size - 8);
  return get<std::uint64_t>(stored, 0) == committed.stored_checksum;
}

}  // namespace

StateDirectory::StateDirectory(std::filesystem::path dir) : dir_(std::move(dir)) {}
StateDirectory::StateDirectory(StateDirectory&&) noexcept = default;
StateDirectory& StateDirectory::operator=(StateDirectory&&) noexcept = default;
StateDirectory::~StateDirectory() = default;

bool StateDirectory::holds_state(const std::filesystem::path& dir) {
  return detail::find_checkpoint_file(dir, kManifestFile).has_value();
}

bool StateDirectory::holds_other_files(const std::filesystem::path& dir,
                                       std::span<const std::string_view> also_ours) {
  if (holds_state(dir) || !std::filesystem::exists(dir)) return false;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    // One of `also_ours`, or the temporary file of a killed save of one.
    const auto ours = [&name](std::string_view own) {
      return name == own || std::string_view(name).starts_with(std::string(own) + ".tmp.");
    };
    if (!is_state_file(name) && !is_state_temp(name) && std::ranges::none_of(also_ours, ours)) {
      return true;
    }
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
  bool synced = std::exchange(synced_, false);  // until this commit is through
  // Each commit, before anything is written: the directory's entry is flushed too when it was
  // there already (made by a user, by the lock, or by a run killed before flushing it).
  detail::create_directories_synced(dir_, "state directory");
  // The manifest this object last committed or loaded may no longer be the directory's: the
  // directory was removed or replaced since, or a relative path now names another one (the
  // process changed its working directory). Its files are then not there to be kept.
  if (committed_ && !manifest_on_disk_is(dir_, *committed_)) {
    committed_.reset();
    synced = false;
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

  next.logs.resize(next.parts.size());
  const std::size_t open = next.parts.size() - 1;

  // Part `i` as the committed base and logs plus `log`, when they describe it (the part was the
  // committed open part and the log continues from that commit), or as a zero base and `log`
  // when it started empty since; false when only its bits tell it, or when its logs would pass
  // kBaseFraction of its `part_bytes`.
  const auto continue_part = [&](std::size_t i, OpenChange change,
                                 std::span<const std::uint64_t> log, std::uint64_t part_bytes) {
    std::optional<StateFile> base;
    std::vector<StateFile> logs;
    if (synced && before != nullptr && before->parts.back() == next.parts[i] &&
        change == OpenChange::since_taken) {
      base = before->files.back();
      logs = before->logs.back();
    } else if (change == OpenChange::since_empty) {
      base = StateFile{{}, part_bytes, 0};
    }
    std::uint64_t log_bytes = log.size() * sizeof(std::uint64_t);
    for (const StateFile& file : logs) log_bytes += file.bytes;
    if (!base || static_cast<double>(log_bytes) > kBaseFraction * static_cast<double>(part_bytes)) {
      return false;
    }
    if (!log.empty()) {
      logs.push_back(
          write_state_file(dir_, prefix + next.parts[i].name() + ".log", std::as_bytes(log)));
      written += logs.back().bytes;
    }
    next.files.push_back(*base);
    next.logs[i] = std::move(logs);
    return true;
  };

  // The sealed parts: one that the committed state held sealed is the same files (checked by
  // the checksum of its bits when this object's log does not descend from the commit); one that
  // closed since is completed by its final log (StateSnapshot::closed); the others are written.
  // Each part's bits are taken once, and not at all for a part kept by a synced commit: bits_of
  // copies a device's to the host.
  std::map<std::string, std::size_t> kept;
  if (before != nullptr) {
    for (std::size_t i = 0; i + 1 < before->parts.size(); ++i) kept[before->parts[i].name()] = i;
  }
  std::map<std::string, const ClosedPart*> closed;
  for (const ClosedPart& part : snapshot.closed) closed[part.id.name()] = &part;
  const auto keep = [&](std::size_t i, std::size_t k) {
    next.files.push_back(before->files[k]);
    next.bits_checksums.push_back(before->bits_checksums[k]);
    next.logs[i] = before->logs[k];
  };
  for (std::size_t i = 0; i < open; ++i) {
    const std::string name = next.parts[i].name();
    const auto found = closed.find(name);
    const auto held = found == closed.end() ? kept.find(name) : kept.end();
    if (held != kept.end() && synced) {
      keep(i, held->second);
      continue;
    }
    bits_of(i, [&](std::span<const std::byte> bits) {
      if (found != closed.end()) {
        const ClosedPart& part = *found->second;
        if (continue_part(i, part.change, part.log, bits.size())) {
          next.bits_checksums.push_back(checksum_of(bits));
          return;
        }
      } else if (held != kept.end()) {
        const std::size_t k = held->second;
        if (before->logs[k].empty() ? holds(before->files[k], bits)
                                    : before->bits_checksums[k] == checksum_of(bits)) {
          keep(i, k);
          return;
        }
      }
      next.files.push_back(part_file(dir_, prefix + name + ".part", bits));
      next.bits_checksums.push_back(0);
      written += next.files.back().name.empty() ? 0 : bits.size();
    });
  }

  // The open part: its base and logs when its log tells it; else its bits as a new base.
  bits_of(open, [&](std::span<const std::byte> bits) {
    if (!continue_part(open, snapshot.change, snapshot.log, bits.size())) {
      next.files.push_back(part_file(dir_, prefix + next.parts[open].name() + ".base", bits));
      written += next.files.back().name.empty() ? 0 : bits.size();
    }
  });
  next.bits_checksums.push_back(0);

  const std::vector<std::byte> manifest = encode_manifest(next);
  next.stored_checksum = get<std::uint64_t>(manifest.data(), manifest.size() - 8);
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
// replays each part's logs into it.
template <typename Restore>
auto load_state(const std::filesystem::path& dir, const Manifest& manifest, Restore&& restore) {
  const std::string source = (dir / kManifestFile).string();
  auto state = restore(
      manifest.metadata,
      [&](std::size_t i, const PartId&, std::span<std::byte> bits) {
        read_state_file(dir, manifest.files[i], bits);
      },
      source);
  std::vector<std::uint64_t> log;
  for (std::size_t i = 0; i < manifest.logs.size(); ++i) {
    for (const StateFile& file : manifest.logs[i]) {
      log.resize(file.bytes / 8);
      read_state_file(dir, file, std::as_writable_bytes(std::span(log)));
      replay_log(state, i, log);
    }
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
        return load_state(dir_, m,
                          [&](auto metadata, const PartFill& fill, const std::string& source) {
                            return restore_window(metadata, fill, state, options, source);
                          });
      },
      committed_);
  synced_ = true;
  return window;
}

WindowShard StateDirectory::load_window_shard(FileState* state, const Options& options) {
  auto shard = load_committed(
      [&] { return read_manifest(kWindowShard); },
      [&](const Manifest& m) {
        return load_state(dir_, m,
                          [&](auto metadata, const PartFill& fill, const std::string& source) {
                            return restore_window_shard(metadata, fill, state, options, source);
                          });
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
        return load_state(dir_, m,
                          [&](auto metadata, const PartFill& fill, const std::string& source) {
                            return restore_grown(metadata, fill, caller_metadata, options, source);
                          });
      },
      committed_);
  synced_ = true;
  return filter;
}

}  // namespace bulkbloom
