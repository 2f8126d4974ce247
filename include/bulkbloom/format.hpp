/// @file
/// Persistence: the versioned file format v1 (docs/FORMAT.md), atomic saves, verified loads,
/// zero-copy mapping, checkpoints for ingestion nodes, and Parquet interop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bulkbloom/error.hpp"
#include "bulkbloom/filter.hpp"
#include "bulkbloom/layout.hpp"

namespace bulkbloom {

/// A file or byte image is not a valid bulkbloom filter (truncated, corrupt, wrong magic, newer
/// version, inconsistent sizes, ...). The message names the file and the problem.
class FormatError : public Error {
 public:
  using Error::Error;
};

/// An operating-system I/O call failed. The message names the path, the call and the reason.
class IoError : public Error {
 public:
  using Error::Error;
  /// For the failed call on `path`, with its errno value.
  IoError(const std::string& what, int error_number, std::filesystem::path path)
      : Error(what), error_number_(error_number), path_(std::move(path)) {}

  /// errno of the failed call (ENOENT, EACCES, ...); 0 when none is known.
  int error_number() const noexcept { return error_number_; }
  /// The path the failed call was given; empty when none is known.
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  int error_number_ = 0;
  std::filesystem::path path_;
};

/// What a filter file holds besides the bits: a key counter and the caller's own bytes (for
/// example a Kafka partition offset) that must stay together with the filter's state.
struct FileState {
  std::uint64_t keys_inserted = 0;  ///< Caller's count of keys inserted (not interpreted).
  std::vector<std::byte> metadata;  ///< Caller's bytes, stored verbatim and checksummed.
};

/// A file's header, as read by read_info().
struct FileInfo {
  std::uint32_t version = 0;         ///< Format version of the file.
  Layout layout;                     ///< The filter's layout.
  std::uint64_t keys_inserted = 0;   ///< FileState::keys_inserted at save time.
  std::uint64_t metadata_bytes = 0;  ///< Length of FileState::metadata.
  std::uint64_t payload_offset = 0;  ///< Byte offset of the filter bits in the file.
  std::uint64_t file_bytes = 0;      ///< Total file size.
  /// For a shard's file (bulkbloom/shard.hpp): how many shards the filter is cut into, and which
  /// of them the payload holds. 0 and 0 for a whole filter's file.
  std::uint32_t num_shards = 0;
  std::uint32_t shard = 0;  ///< Which shard, in [0, num_shards).
};

/// The current (and newest readable) format version.
inline constexpr std::uint32_t kFormatVersion = 1;

/// Writes `filter` and `state` to `path` atomically: a temporary file in the same directory is
/// written, flushed to disk and renamed over `path`, then the directory is flushed. A crash at
/// any moment leaves either the old file or the new one. Throws IoError.
void save(const Filter& filter, const std::filesystem::path& path, const FileState& state = {});

/// Reads and fully verifies a filter file onto the backend chosen by `options`. A shard's file
/// reads only as load_shard() (bulkbloom/shard.hpp), unless it is shard 0 of 1.
/// Throws FormatError for a bad file, IoError when it cannot be read.
Filter load(const std::filesystem::path& path, FileState* state = nullptr,
            const Options& options = {});

/// Reads and verifies only the header of a filter file.
FileInfo read_info(const std::filesystem::path& path);

/// How map() treats the file.
struct MapOptions {
  /// Verify the payload checksum (reads every page once). Turn off only for a file whose
  /// checksum was verified before, e.g. a multi-GB filter reopened on the same machine.
  bool verify = true;
  /// Worker threads and CPU implementation for bulk calls: the backend is always the CPU
  /// (Backend::cuda, or a cuda implementation, throws std::invalid_argument).
  Options options = {};
};

/// Maps a filter file into memory without copying: pages are read on first touch. The mapping is
/// private: inserts into the returned filter copy the touched pages and never change the file
/// (save() it to persist). Throws FormatError / IoError as load() does.
Filter map(const std::filesystem::path& path, FileState* state = nullptr,
           const MapOptions& options = {});

/// Exactly the bytes save(filter, path, state) writes, in memory (for stream processors' state
/// and pickling). Every kind has the same pair: to_file_bytes() and a loader that takes a path or
/// the bytes (load, load_shard, load_window, load_window_shard; GrownFilter's own).
std::vector<std::byte> to_file_bytes(const Filter& filter, const FileState& state = {});

/// load() of file bytes held in memory, fully verified; `source` names them in errors.
/// Throws FormatError for bad bytes.
Filter load(std::span<const std::byte> bytes, FileState* state = nullptr,
            const Options& options = {}, const std::string& source = "filter bytes");

/// A filter together with the caller's metadata from one checkpoint.
struct Checkpoint {
  Filter filter;                    ///< The filter as it was at the checkpoint.
  std::vector<std::byte> metadata;  ///< The caller's bytes saved with it.
  std::uint64_t keys_inserted = 0;  ///< The caller's key counter saved with it.
};

/// Saves a checkpoint into directory `dir` (created if missing): the filter and `state` are
/// written atomically as one file, so both always belong to the same moment. Throws IoError.
void save_checkpoint(const std::filesystem::path& dir, const Filter& filter,
                     const FileState& state);

/// The latest checkpoint in `dir`, or nothing if none was ever completed there.
/// Throws FormatError if the checkpoint file exists but is damaged, IoError if `dir` is not a
/// directory or cannot be searched (a resumed run must not start over by mistake).
std::optional<Checkpoint> load_checkpoint(const std::filesystem::path& dir,
                                          const Options& options = {});

/// The kinds of file bulkbloom writes, told apart by their first bytes (docs/FORMAT.md).
enum class FileKind {
  unknown,       ///< None of them (or shorter than a magic).
  filter,        ///< A filter file: load(), map(); GrownFilter::load() reads its sizing record.
  filter_shard,  ///< A filter shard's file: load_shard() (bulkbloom/shard.hpp).
  grown_filter,  ///< A grown filter file: GrownFilter::load() (bulkbloom/grown_filter.hpp).
  window,        ///< A window's file or a window shard's: load_window(), load_window_shard().
};

/// What kind of bulkbloom file `path` holds, from its magic bytes (and, for a filter file, its
/// verified header, which tells a shard's). Throws IoError when it cannot be read, FormatError
/// for a filter file whose header is damaged.
FileKind file_kind(const std::filesystem::path& path);

/// The Parquet split-block Bloom filter of a column chunk for this filter: the Thrift compact
/// BloomFilterHeader (SPLIT_BLOCK, XXHASH, UNCOMPRESSED) followed by the bitset. Requires an sb256
/// layout with the xxh64 hash, seed 0 and the high32 block index, which is how Parquet readers
/// place keys (std::invalid_argument otherwise), and at most 2^31 - 1 bitset bytes.
std::vector<std::byte> to_parquet(const Filter& filter);

/// Reads a Parquet Bloom filter (header followed by bitset, as to_parquet() writes and Parquet
/// writers store it) into an sb256, xxh64, seed-0 filter. Throws FormatError for anything else.
Filter from_parquet(std::span<const std::byte> bytes, const Options& options = {});

}  // namespace bulkbloom
