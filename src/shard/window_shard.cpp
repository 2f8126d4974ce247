// Window shards (DESIGN §9): a shard's G generations are a WindowedFilter of the shard's blocks
// (the local layout of shard_math.hpp), fed each key's hash, which it moves into its blocks of
// each generation's size, and the whole window's clock, which the caller gives. The clock rules
// are in docs/WINDOW.md "Shards", the sizing rules in "Sizing shards".
#include "bulkbloom/window_shard.hpp"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/filter_access.hpp"
#include "core/span_checks.hpp"
#include "persist/file_io.hpp"
#include "registry/backend.hpp"
#include "shard/shard_keys.hpp"
#include "shard/window_shard_access.hpp"
#include "window/window_access.hpp"

namespace bulkbloom {

namespace {

using detail::check_size;
using detail::WindowAccess;

const detail::HostKernels& host_kernels(const WindowedFilter& window) {
  return *detail::FilterAccess::engine(window.generation(0)).host().kernels;
}

bool same_config(const WindowConfig& a, const WindowConfig& b) {
  return a.clock == b.clock && a.window == b.window && a.generations == b.generations &&
         a.lateness == b.lateness && a.generation == b.generation && a.fpr == b.fpr &&
         a.block_multiple == b.block_multiple;
}

// The one clock of a complete set of shards: every field but (on event time) records_seen must
// agree, and records_seen, each shard's own count there, adds up.
WindowAccess::Clock common_clock(std::span<const WindowShard* const> sorted) {
  const WindowShard& first = *sorted.front();
  WindowAccess::Clock clock = WindowAccess::clock(WindowShardAccess::local(first));
  const bool additive = first.config().clock == WindowClock::event_time;
  std::uint64_t records = 0;
  for (const WindowShard* shard : sorted) {
    const WindowAccess::Clock c = WindowAccess::clock(WindowShardAccess::local(*shard));
    auto differ = [&](const char* field, auto mine, auto theirs) {
      if (mine == theirs) return;
      throw std::invalid_argument("window shards disagree on " + std::string(field) + ": shard " +
                                  std::to_string(first.index()) + " has " + std::to_string(mine) +
                                  ", shard " + std::to_string(shard->index()) + " has " +
                                  std::to_string(theirs) +
                                  "; every shard must be given the whole window's clock");
    };
    differ("started", clock.started, c.started);
    differ("newest period", clock.newest_epoch, c.newest_epoch);
    differ("clock time", clock.clock_time, c.clock_time);
    differ("rotations", clock.rotations, c.rotations);
    if (!additive) differ("records seen", clock.records_seen, c.records_seen);
    records += c.records_seen;
  }
  if (additive) clock.records_seen = records;
  return clock;
}

// The shards sorted by index, after checking that they are all the shards of one window.
std::vector<const WindowShard*> complete_set(std::span<const WindowShard> shards) {
  return detail::complete_set(
      shards, "window",
      [](const WindowShard& a, const WindowShard& b) {
        return same_config(a.config(), b.config());
      },
      [](const WindowShard& shard) { return shard.config().describe(); });
}

// A window's clock as shard `index` holds it: on event time records_seen is a shard's own count,
// so shard 0 carries the whole count and the others none. Key counts are split the same way.
WindowAccess::Clock clock_for_shard(WindowAccess::Clock clock, const WindowConfig& config,
                                    std::uint32_t index) {
  if (config.clock == WindowClock::event_time && index != 0) clock.records_seen = 0;
  return clock;
}

// The filters of the whole window (its block counts, oldest first) and their keys, from the
// windows `sources` of shards 0..n-1 of n (a whole window: n = 1), checked to agree on the
// sizes: each source's keys are its own, and the whole window's are their sum.
std::vector<WindowAccess::PartRecord> whole_records(
    std::span<const WindowedFilter* const> sources) {
  std::vector<WindowAccess::PartRecord> whole;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    auto records = WindowAccess::records_oldest_first(*sources[i]);
    for (auto& record : records) {
      record.num_blocks = WindowAccess::whole_blocks(*sources[i], record.num_blocks);
    }
    if (i == 0) {
      whole = records;
      for (auto& record : whole) record.window_keys = record.keys;
      continue;
    }
    auto sizes = [](const std::vector<WindowAccess::PartRecord>& parts) {
      std::string text;
      for (const auto& part : parts) {
        text += (text.empty() ? "" : ", ") + std::string("generation ") +
                std::to_string(part.generation) + ": " + std::to_string(part.num_blocks);
      }
      return text;
    };
    const bool same =
        records.size() == whole.size() &&
        std::equal(records.begin(), records.end(), whole.begin(), [](const auto& a, const auto& b) {
          return a.generation == b.generation && a.num_blocks == b.num_blocks;
        });
    if (!same) {
      throw std::invalid_argument(
          "window shards 0 and " + std::to_string(i) +
          " sized their generations differently (blocks of the whole window: " + sizes(whole) +
          " vs " + sizes(records) +
          "): shards that size from their own keys cannot be joined; give every shard the whole "
          "window's keys (set_window_keys) before each period to keep them equal");
    }
    for (std::size_t p = 0; p < whole.size(); ++p) {
      whole[p].keys += records[p].keys;
      whole[p].window_keys += records[p].keys;
    }
  }
  return whole;
}

// Fills `target` (a new window of the blocks of shard `want_index` of `want_shards`, or a whole
// window for 0 of 1) with the filters `whole` describes (whole window's block counts, oldest
// first; each target filter is the shard's blocks of it), with `keys` and the whole window's
// keys, and the bytes of those blocks from `sources`, windows of shards 0..n-1 of n.
void copy_blocks(const WindowConfig& config, std::span<const WindowedFilter* const> sources,
                 std::uint32_t want_index, std::uint32_t want_shards, WindowedFilter& target,
                 std::span<const WindowAccess::PartRecord> whole,
                 std::span<const std::uint64_t> keys) {
  const std::uint64_t block_bytes = bulkbloom::block_bytes(config.generation.shape);
  const auto have_shards = static_cast<std::uint32_t>(sources.size());
  std::vector<std::vector<const Filter*>> source_filters;
  for (const WindowedFilter* source : sources) {
    source_filters.push_back(WindowAccess::oldest_first(*source));
  }
  std::vector<WindowAccess::PartRecord> records;
  for (std::size_t p = 0; p < whole.size(); ++p) {
    records.push_back({whole[p].generation,
                       shard_blocks(whole[p].num_blocks, want_index, want_shards).size(), keys[p],
                       whole[p].window_keys});
  }
  const std::vector<Filter*> filters = WindowAccess::restore_oldest_first(target, records);
  for (std::size_t p = 0; p < whole.size(); ++p) {
    detail::fill_filter_bits(*filters[p], [&](std::span<std::byte> bytes) {
      detail::copy_from_shards(
          whole[p].num_blocks, have_shards,
          [&](std::uint32_t i) { return detail::HostBits(*source_filters[i][p]); }, bytes,
          shard_blocks(whole[p].num_blocks, want_index, want_shards), block_bytes);
    });
  }
}

// Throws unless the filters `whole` describes can be cut into `num_shards` shards: all of the
// configured size, one a generation, or sized per period by such shards.
void check_cuttable(const WindowConfig& config, std::span<const WindowAccess::PartRecord> whole,
                    std::uint32_t num_shards) {
  shard_blocks(config.generation.num_blocks, 0, num_shards);  // checks the shard count
  const bool configured = whole.size() == config.generations &&
                          std::all_of(whole.begin(), whole.end(), [&](const auto& part) {
                            return part.num_blocks == config.generation.num_blocks;
                          });
  if (configured || shards_size_per_period(config, num_shards)) return;
  std::string sizes;
  for (const auto& part : whole) {
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(part.num_blocks);
  }
  throw std::invalid_argument(
      "this window's generations were sized for the keys of their periods (" +
      std::to_string(whole.size()) + " filters for " + std::to_string(config.generations) +
      " generations, of " + sizes + " blocks), and " + std::to_string(num_shards) +
      " shards hold them only when " + std::to_string(num_shards) +
      " divides the window's block multiple, " + std::to_string(config.block_multiple) +
      (config.fpr == 0.0 ? ", and its promise is known" : "") +
      " (make the window with WindowConfig::shardable_by)");
}

// The keys of the shards of a split or reshard: shard 0 takes the whole window's, the others
// none (each key went to one shard, but which is not known from the bits).
std::vector<std::uint64_t> keys_for_shard(std::span<const WindowAccess::PartRecord> whole,
                                          std::uint32_t index) {
  std::vector<std::uint64_t> keys;
  for (const auto& part : whole) keys.push_back(index == 0 ? part.keys : 0);
  return keys;
}

}  // namespace

bool shards_size_per_period(const WindowConfig& config, std::uint32_t num_shards) {
  return config.fpr != 0.0 && num_shards != 0 && config.block_multiple % num_shards == 0;
}

// The generations of shards that size per period are the whole window's shares: the local
// configuration keeps the promise and the block multiple's share, and the window sizes them from
// the whole layout (WindowAccess::make_part). Other shards' generations keep the configured
// size: the local promise is left unknown.
WindowedFilter WindowShardAccess::empty_local(const WindowConfig& config, std::uint32_t index,
                                              std::uint32_t num_shards, const Options& options,
                                              bool write) {
  config.validate();
  const ShardPlacement place(config.generation.num_blocks, index, num_shards);
  const bool sized = shards_size_per_period(config, num_shards);
  WindowConfig local = config;
  local.fpr = sized ? config.fpr : 0.0;
  local.block_multiple = sized ? config.block_multiple / num_shards : 1;
  local.generation = detail::local_layout(config.generation, place.blocks().size());
  WindowedFilter window =
      write ? WindowedFilter(local, options) : WindowAccess::unwritten(local, options);
  WindowAccess::make_part(window, config.generation, num_shards,
                          std::make_shared<const detail::ShardHashes>(config.generation, place));
  return window;
}

WindowShard::WindowShard(const WindowConfig& config, std::uint32_t index, std::uint32_t num_shards,
                         const Options& options)
    : WindowShard(config, index, num_shards,
                  WindowShardAccess::empty_local(config, index, num_shards, options)) {}

WindowShard::WindowShard(const WindowConfig& config, std::uint32_t index, std::uint32_t num_shards,
                         WindowedFilter local)
    : ShardPlacement(config.generation.num_blocks, index, num_shards),
      config_(config),
      local_(std::move(local)) {}

WindowShard::WindowShard(WindowShard&&) noexcept = default;
WindowShard& WindowShard::operator=(WindowShard&&) noexcept = default;
WindowShard::~WindowShard() = default;

std::uint64_t WindowShard::generation_bytes() const {
  return local_.config().generation.size_bytes();
}

std::string WindowShard::implementation() const {
  return local_.implementation();
}

template <typename Key>
std::uint64_t WindowShard::dedup_keys(std::span<const Key> keys,
                                      std::span<const std::int64_t> clocks,
                                      std::span<std::uint8_t> is_new, const Layout& key_layout) {
  check_size(keys.size(), is_new.size(), "insert_if_absent: is_new span");
  check_size(keys.size(), clocks.size(), "insert_if_absent: clocks span");
  if (config_.clock == WindowClock::records) {
    std::uint64_t next = local_.records_seen();
    for (std::size_t i = 0; i < clocks.size(); ++i) {
      if (clocks[i] < 0 || static_cast<std::uint64_t>(clocks[i]) < next) {
        throw std::invalid_argument(
            "record position " + std::to_string(clocks[i]) + " at index " + std::to_string(i) +
            " comes before " + std::to_string(next) +
            ": a records-clock window shard needs each record's position in the whole stream, "
            "increasing");
      }
      next = static_cast<std::uint64_t>(clocks[i]) + 1;
    }
  }
  const detail::HostKernels& host = host_kernels(local_);
  std::uint64_t fresh = 0;
  // The window of the shard's blocks moves each hash into its blocks of each generation.
  detail::for_each_owned_chunk<false>(
      host, key_layout, *this, keys, [&](auto hashes, std::size_t offset) {
        fresh += WindowAccess::dedup_at(local_, hashes, clocks.subspan(offset, hashes.size()),
                                        is_new.data() + offset);
      });
  return fresh;
}

template <typename Key>
void WindowShard::contains_keys(std::span<const Key> keys, std::span<std::uint8_t> out) const {
  check_size(keys.size(), out.size(), "contains: output span");
  detail::for_each_local_chunk<false>(
      host_kernels(local_), config_.generation, *this, keys, [&](auto hashes, std::size_t offset) {
        WindowAccess::contains_hashes(local_, hashes, out.data() + offset);
      });
}

std::uint64_t WindowShard::insert_if_absent(std::span<const std::uint64_t> keys,
                                            std::span<const std::int64_t> clocks,
                                            std::span<std::uint8_t> is_new) {
  return dedup_keys(keys, clocks, is_new, config_.generation);
}

std::uint64_t WindowShard::insert_if_absent(std::span<const std::string_view> keys,
                                            std::span<const std::int64_t> clocks,
                                            std::span<std::uint8_t> is_new) {
  return dedup_keys(keys, clocks, is_new, config_.generation);
}

std::uint64_t WindowShard::insert_hashes_if_absent(std::span<const std::uint64_t> hashes,
                                                   std::span<const std::int64_t> clocks,
                                                   std::span<std::uint8_t> is_new) {
  // Under the identity hash a key is its own hash: the same blocks and bits as the keys'.
  Layout hashed = config_.generation;
  hashed.hash = KeyHash::identity;
  return dedup_keys(hashes, clocks, is_new, hashed);
}

void WindowShard::contains(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out) const {
  contains_keys(keys, out);
}

void WindowShard::contains(std::span<const std::string_view> keys,
                           std::span<std::uint8_t> out) const {
  contains_keys(keys, out);
}

void WindowShard::advance_to(std::int64_t clock) {
  if (config_.clock == WindowClock::event_time) {
    local_.advance_to(clock);
    return;
  }
  if (clock < 0) {
    throw std::invalid_argument("record count " + std::to_string(clock) +
                                " is negative: advance_to on a records-clock window shard takes "
                                "the number of records the whole window has processed");
  }
  WindowAccess::advance_records(local_, static_cast<std::uint64_t>(clock));
}

std::uint64_t WindowShard::records_seen() const {
  return local_.records_seen();
}

std::optional<std::int64_t> WindowShard::clock_time() const {
  return local_.clock_time();
}

std::uint64_t WindowShard::rotations() const {
  return local_.rotations();
}

const Filter& WindowShard::generation(std::uint32_t age) const {
  return local_.generation(age);
}

double WindowShard::current_fpr() const {
  return local_.current_fpr();
}

std::vector<std::uint64_t> WindowShard::filter_keys() const {
  std::vector<std::uint64_t> keys;
  for (const auto& part : WindowAccess::records_oldest_first(local_)) keys.push_back(part.keys);
  return keys;
}

std::vector<std::uint64_t> WindowShard::filter_blocks() const {
  std::vector<std::uint64_t> blocks;
  for (const auto& part : WindowAccess::records_oldest_first(local_)) {
    blocks.push_back(WindowAccess::whole_blocks(local_, part.num_blocks));
  }
  return blocks;
}

void WindowShard::set_window_keys(std::span<const std::uint64_t> keys) {
  const std::size_t filters = WindowAccess::records_oldest_first(local_).size();
  if (keys.size() != filters) {
    throw std::invalid_argument(
        "set_window_keys: " + std::to_string(keys.size()) + " key counts for the " +
        std::to_string(filters) + " filters of window shard " + std::to_string(index()) + " of " +
        std::to_string(num_shards()) + ": give one per filter_keys() entry");
  }
  WindowAccess::set_window_keys(local_, keys);
}

std::vector<WindowShard> split(const WindowedFilter& window, std::uint32_t num_shards,
                               const Options& options) {
  const WindowConfig& config = window.config();
  const WindowedFilter* source = &window;
  const auto whole = whole_records({&source, 1});
  check_cuttable(config, whole, num_shards);
  const WindowAccess::Clock clock = WindowAccess::clock(window);
  std::vector<WindowShard> shards;
  shards.reserve(num_shards);
  for (std::uint32_t i = 0; i < num_shards; ++i) {
    WindowShard& shard = shards.emplace_back(config, i, num_shards, options);
    WindowedFilter& local = WindowShardAccess::local(shard);
    copy_blocks(config, {&source, 1}, i, num_shards, local, whole, keys_for_shard(whole, i));
    WindowAccess::set_clock(local, clock_for_shard(clock, config, i));
  }
  return shards;
}

WindowedFilter concat(std::span<const WindowShard> shards, const Options& options) {
  const auto sorted = complete_set(shards);
  const WindowAccess::Clock clock = common_clock(sorted);
  const WindowConfig& config = sorted.front()->config();
  std::vector<const WindowedFilter*> sources;
  for (const WindowShard* shard : sorted) sources.push_back(&WindowShardAccess::local(*shard));
  const auto whole = whole_records(sources);
  std::vector<std::uint64_t> keys;
  for (const auto& part : whole) keys.push_back(part.keys);
  WindowedFilter window(config, options);
  copy_blocks(config, sources, 0, 1, window, whole, keys);
  WindowAccess::set_clock(window, clock);
  return window;
}

std::vector<WindowShard> reshard(std::span<const WindowShard> shards, std::uint32_t num_shards,
                                 const Options& options) {
  const auto sorted = complete_set(shards);
  const WindowAccess::Clock clock = common_clock(sorted);
  const WindowConfig& config = sorted.front()->config();
  std::vector<const WindowedFilter*> sources;
  for (const WindowShard* shard : sorted) sources.push_back(&WindowShardAccess::local(*shard));
  const auto whole = whole_records(sources);
  check_cuttable(config, whole, num_shards);
  std::vector<WindowShard> result;
  result.reserve(num_shards);
  for (std::uint32_t j = 0; j < num_shards; ++j) {
    WindowShard& shard = result.emplace_back(config, j, num_shards, options);
    WindowedFilter& local = WindowShardAccess::local(shard);
    copy_blocks(config, sources, j, num_shards, local, whole, keys_for_shard(whole, j));
    WindowAccess::set_clock(local, clock_for_shard(clock, config, j));
  }
  return result;
}

}  // namespace bulkbloom
