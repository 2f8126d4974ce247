#include "cli/filter_options.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "cli/carried_filter.hpp"

namespace bulkbloom::cli {
namespace {

// Bytes of the first input read to estimate the mean record length of a text input.
constexpr std::size_t kSizingSample = std::size_t{1} << 20;

}  // namespace

std::uint64_t estimated_records(const ChunkReader& reader, const RecordFormat& format) {
  if (format.kind == FormatKind::u64) return reader.total_bytes() / 8;
  const std::string sample = reader.sample_first_input(kSizingSample);
  if (sample.empty()) return 0;  // every input is empty
  const auto lines = static_cast<std::uint64_t>(std::count(sample.begin(), sample.end(), '\n'));
  // Records are at least as many as the sample's density predicts; one more covers a last line
  // without its newline.
  const double per_byte =
      static_cast<double>(std::max<std::uint64_t>(lines, 1)) / static_cast<double>(sample.size());
  return static_cast<std::uint64_t>(per_byte * static_cast<double>(reader.total_bytes())) + 1;
}

void add_sizing_options(ArgParser& parser) {
  parser
      .value("capacity", "N",
             "distinct keys the filter is sized for (default: estimated from the input size)")
      .value("fpr", "P", "false-positive rate at capacity (default 0.001)")
      .value("shape", "S",
             "block shape sb256, sb256x4, sb512 or sb512x16 of the first generation (default: "
             "smallest; a generation added when the keys pass the rate is the smallest for its "
             "size)")
      .value("seed", "N", "XXH64 seed, any 64-bit integer, decimal or 0x hex (default 0)")
      .value("index", "I",
             "block index high32 (Parquet's) or full64 of the first generation (default: high32 "
             "unless its uneven block loads would raise the FPR by over 0.5%, beyond ~10^8 "
             "blocks)")
      .value("num-blocks", "N",
             "exactly N blocks of --shape instead of the count --capacity and --fpr size (to "
             "reproduce another tool's layout, e.g. a Spark filter directory's; with --seed and "
             "--index as that layout has them): build keeps exactly that layout and stops when its "
             "model passes 3/4 of --fpr, where a filter would grow; dedup starts with it and "
             "grows");
}

void add_backend_options(ArgParser& parser) {
  parser
      .value("threads", "N",
             "worker threads (default: one per hardware thread; writes to filters under 1 MiB use "
             "one)")
      .value("backend", "B", "auto, cpu or cuda (default auto)");
}

Options backend_options(const ArgParser& parser) {
  Options options;
  try {
    options.backend = parse_backend(parser.get_or("backend", "auto"));
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--backend: ") + e.what());
  }
  if (const auto threads = parser.get_count("threads")) {
    if (*threads > 4096) {
      throw UsageError("--threads: " + std::to_string(*threads) + " is more than the limit 4096");
    }
    options.threads = static_cast<unsigned>(*threads);
  }
  return options;
}

SizingRequest sizing_request(const ArgParser& parser) {
  SizingRequest request;
  request.capacity = parser.get_count("capacity");
  if (request.capacity == 0u) throw UsageError("--capacity must be at least 1 key, got 0");
  request.fpr = parser.get_double("fpr").value_or(kDefaultFpr);
  if (!(request.fpr > 0.0 && request.fpr < 1.0)) {
    throw UsageError("--fpr: the false-positive rate must be in (0, 1), got " +
                     parser.get_or("fpr", ""));
  }
  try {
    if (const auto shape = parser.get("shape")) request.shape = parse_shape(*shape);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--shape: ") + e.what());
  }
  request.seed = parser.get_count("seed").value_or(0);
  try {
    if (const auto index = parser.get("index")) request.index = parse_block_index(*index);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--index: ") + e.what());
  }
  request.num_blocks = parser.get_count("num-blocks");
  if (request.num_blocks) {
    if (!request.shape) throw UsageError("--num-blocks needs --shape: blocks of which shape?");
    if (*request.num_blocks == 0 || *request.num_blocks > Layout::kMaxBlocks) {
      throw UsageError("--num-blocks: " + std::to_string(*request.num_blocks) +
                       " is outside 1 to " + std::to_string(Layout::kMaxBlocks));
    }
  }
  return request;
}

std::uint64_t sized_capacity(const SizingRequest& request, const ChunkReader& reader,
                             const RecordFormat& format, std::string& capacity_note,
                             bool can_grow) {
  if (request.capacity) {
    capacity_note = "given";
    return *request.capacity;
  }
  if (!reader.total_known() && can_grow) {
    std::fprintf(stderr,
                 "bulkbloom: warning: the input's size is unknown (not a regular file): the "
                 "filter starts sized for %llu keys and grows as the keys come (--capacity N "
                 "sizes it)\n",
                 static_cast<unsigned long long>(kPipedCapacity));
    capacity_note = "default for input of unknown size";
    return kPipedCapacity;
  }
  if (!reader.total_known()) {
    throw UsageError(
        "the input is not a regular file, so its size cannot size the filter: give --capacity N "
        "(the number of distinct keys expected)");
  }
  capacity_note = "estimated from the input size";
  return std::max<std::uint64_t>(estimated_records(reader, format), 1);
}

Layout sized_layout(const SizingRequest& request, std::uint64_t capacity) {
  // Sized at the promise itself, the first generation would pass its target a little before
  // `capacity` keys and grow (or, with --on-full error, refuse) on the very input it was sized for.
  const double target = GrownFilter::generation_target(request.fpr, 0);
  if (request.num_blocks) {
    return Layout{*request.shape, *request.num_blocks, KeyHash::xxh64, request.seed,
                  request.index.value_or(BlockIndex::high32)};
  }
  try {
    if (request.shape) {
      return Layout::for_capacity(*request.shape, capacity, target, KeyHash::xxh64, request.seed,
                                  request.index);
    }
    return Layout::for_capacity(capacity, target, KeyHash::xxh64, request.seed, request.index);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace bulkbloom::cli
