// Options shared by the subcommands that make or open filters: sizing, backend, threads.
#pragma once

#include <bulkbloom/filter.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "cli/args.hpp"
#include "cli/chunk_reader.hpp"

namespace bulkbloom::cli {

/// The false-positive rate filters are sized for without --fpr.
inline constexpr double kDefaultFpr = 0.001;

/// Declares --capacity, --fpr, --shape, --seed, --index, --num-blocks.
void add_sizing_options(ArgParser& parser);
/// Declares --threads, --backend.
void add_backend_options(ArgParser& parser);

/// Options from --threads and --backend (auto, cpu, cuda).
Options backend_options(const ArgParser& parser);

/// What --capacity, --fpr, --shape and --seed ask for, checked before any input is opened.
struct SizingRequest {
  std::optional<std::uint64_t> capacity;  ///< Absent: estimate from the input size.
  double fpr = 0.001;
  std::optional<Shape> shape;  ///< Absent: the smallest shape for the target.
  std::uint64_t seed = 0;
  std::optional<BlockIndex> index;  ///< Absent: chosen by Layout::for_capacity.
  /// Present: exactly this many blocks of `shape` (which is then present too), index high32
  /// unless `index` says otherwise; capacity and fpr still make the promise the filter records.
  std::optional<std::uint64_t> num_blocks;
};

/// Reads and checks the sizing options; throws UsageError.
SizingRequest sizing_request(const ArgParser& parser);

/// The capacity `request` asks for; without one, the record count of `reader`'s inputs is
/// estimated. Inputs of unknown size (pipes) get kPipedCapacity when the filter `can_grow`, and
/// are a UsageError otherwise (a window cannot grow). Sets `capacity_note` to say where it came
/// from.
std::uint64_t sized_capacity(const SizingRequest& request, const ChunkReader& reader,
                             const RecordFormat& format, std::string& capacity_note,
                             bool can_grow = false);

/// The capacity a filter that can grow starts with when nothing tells the input's size (a pipe)
/// and --capacity is not given: a warning says so.
inline constexpr std::uint64_t kPipedCapacity = 10'000'000;

/// The layout of a new carried filter (dedup, build) for `request` at `capacity` keys (from
/// sized_capacity()): sized at its first generation's target rate, three quarters of --fpr
/// (docs/FORMAT.md, "Growth"), so that it holds `capacity` keys before it grows.
Layout sized_layout(const SizingRequest& request, std::uint64_t capacity);

/// The number of records of `reader`'s inputs (all regular files), estimated from their sizes
/// (for text formats, from the line density of a sample of the first).
std::uint64_t estimated_records(const ChunkReader& reader, const RecordFormat& format);

}  // namespace bulkbloom::cli
