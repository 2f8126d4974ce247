// Window shards (DESIGN §9): a shard's G generations are a WindowedFilter of the shard's blocks
// (the local layout of shard_math.hpp), fed each key's hash moved into its local block and the
// whole window's clock, which the caller gives. The clock rules are in docs/WINDOW.md "Shards".
#include "bulkbloom/window_shard.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/filter_access.hpp"
#include "persist/file_io.hpp"
#include "registry/backend.hpp"
#include "shard/shard_keys.hpp"
#include "shard/window_shard_access.hpp"
#include "window/window_access.hpp"

namespace bulkbloom {

namespace {

using detail::WindowAccess;

void check_size(std::size_t expected, std::size_t actual, const char* what) {
  if (expected != actual) {
    throw std::invalid_argument(std::string(what) + " has " + std::to_string(actual) +
                                " entries; expected " + std::to_string(expected));
  }
}

// The window of the blocks of shard `index` of `num_shards` of `config`, as a window of its own.
// Its generations keep the configured size: a shard sees only its own keys, so sizing them from
// what it sees would make the shards' generations differ (docs/WINDOW.md "Shards").
WindowedFilter local_window(const WindowConfig& config, std::uint32_t index,
                            std::uint32_t num_shards, const Options& options) {
  config.validate();
  WindowConfig local = config;
  local.fpr = 0.0;
  local.generation = detail::local_layout(
      config.generation, shard_blocks(config.generation.num_blocks, index, num_shards).size());
  return WindowedFilter(local, options);
}

const detail::HostKernels& host_kernels(const WindowedFilter& window) {
  return *detail::FilterAccess::engine(window.generation(0)).host().kernels;
}

bool same_config(const WindowConfig& a, const WindowConfig& b) {
  return a.clock == b.clock && a.window == b.window && a.generations == b.generations &&
         a.lateness == b.lateness && a.generation == b.generation && a.fpr == b.fpr;
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

// The keys each generation of the window took, oldest first, from windows of consecutive block
// ranges that together cover the whole window: each key went to one of them.
std::vector<std::uint64_t> summed_keys(std::span<const WindowedFilter* const> sources) {
  std::vector<std::uint64_t> keys(sources.front()->config().generations, 0);
  for (const WindowedFilter* source : sources) {
    const auto records = WindowAccess::records_oldest_first(*source);  // one filter a generation
    for (std::size_t g = 0; g < keys.size(); ++g) keys[g] += records[g].keys;
  }
  return keys;
}

// Fills every generation of `target` (a new window of the blocks `want` of `config.generation`)
// with the bytes of those blocks from `sources`, windows of consecutive block ranges `have`
// that together cover `want`, and gives its generations the key counts `keys` (oldest first).
void copy_blocks(const WindowConfig& config, std::span<const WindowedFilter* const> sources,
                 std::span<const BlockSpan> have, BlockSpan want, WindowedFilter& target,
                 std::span<const std::uint64_t> keys) {
  const std::uint64_t block_bytes = bulkbloom::block_bytes(config.generation.shape);
  std::vector<std::vector<const Filter*>> source_generations;
  for (const WindowedFilter* source : sources) {
    source_generations.push_back(WindowAccess::oldest_first(*source));
  }
  std::vector<WindowAccess::PartRecord> records;
  for (std::size_t g = 0; g < keys.size(); ++g) {
    records.push_back({g, target.generation(0).layout().num_blocks, keys[g]});
  }
  const std::vector<Filter*> ring = WindowAccess::restore_oldest_first(target, records);
  std::vector<std::byte> staging(want.size() * block_bytes);
  for (std::uint32_t g = 0; g < config.generations; ++g) {
    for (std::size_t i = 0; i < sources.size(); ++i) {
      const std::uint64_t begin = std::max(have[i].begin, want.begin);
      const std::uint64_t end = std::min(have[i].end, want.end);
      if (begin >= end) continue;
      const detail::HostBits bits(*source_generations[i][g]);
      std::memcpy(staging.data() + (begin - want.begin) * block_bytes,
                  bits.bytes().data() + (begin - have[i].begin) * block_bytes,
                  (end - begin) * block_bytes);
    }
    ring[g]->copy_bytes_from(staging);
  }
}

}  // namespace

WindowShard::WindowShard(const WindowConfig& config, std::uint32_t index, std::uint32_t num_shards,
                         const Options& options)
    : WindowShard(config, index, num_shards, local_window(config, index, num_shards, options)) {}

WindowShard::WindowShard(const WindowConfig& config, std::uint32_t index, std::uint32_t num_shards,
                         WindowedFilter local)
    : config_(config),
      index_(index),
      num_shards_(num_shards),
      blocks_(shard_blocks(config.generation.num_blocks, index, num_shards)),
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
                                      std::span<std::uint8_t> is_new) {
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
  const detail::ShardPlace place{config_.generation, index_, num_shards_, blocks_};
  const detail::HostKernels& host = host_kernels(local_);
  detail::check_owned(host, place, keys);
  std::uint64_t fresh = 0;
  detail::for_each_local_chunk(host, place, keys, [&](auto local, std::size_t offset) {
    fresh += WindowAccess::dedup_at(local_, local, clocks.subspan(offset, local.size()),
                                    is_new.data() + offset);
  });
  return fresh;
}

template <typename Key>
void WindowShard::contains_keys(std::span<const Key> keys, std::span<std::uint8_t> out) const {
  check_size(keys.size(), out.size(), "contains: output span");
  const detail::ShardPlace place{config_.generation, index_, num_shards_, blocks_};
  detail::for_each_local_chunk(host_kernels(local_), place, keys,
                               [&](auto local, std::size_t offset) {
                                 WindowAccess::contains_hashes(local_, local, out.data() + offset);
                               });
}

std::uint64_t WindowShard::insert_if_absent(std::span<const std::uint64_t> keys,
                                            std::span<const std::int64_t> clocks,
                                            std::span<std::uint8_t> is_new) {
  return dedup_keys(keys, clocks, is_new);
}

std::uint64_t WindowShard::insert_if_absent(std::span<const std::string_view> keys,
                                            std::span<const std::int64_t> clocks,
                                            std::span<std::uint8_t> is_new) {
  return dedup_keys(keys, clocks, is_new);
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

std::vector<WindowShard> split(const WindowedFilter& window, std::uint32_t num_shards,
                               const Options& options) {
  const WindowConfig& config = window.config();
  const BlockSpan whole{0, config.generation.num_blocks};
  shard_blocks(whole.end, 0, num_shards);  // checks the shard count
  const auto parts = WindowAccess::records_oldest_first(window);
  for (const WindowAccess::PartRecord& part : parts) {
    if (parts.size() != config.generations || part.num_blocks != config.generation.num_blocks) {
      throw std::invalid_argument(
          "this window's generations were sized for the keys of their periods (generation " +
          std::to_string(part.generation) + ": " + std::to_string(part.num_blocks) + " blocks in " +
          std::to_string(parts.size()) + " filters for " + std::to_string(config.generations) +
          " generations), and window shards hold "
          "generations of the configured " +
          std::to_string(config.generation.num_blocks) + " blocks only");
    }
  }
  const WindowedFilter* source = &window;
  const WindowAccess::Clock clock = WindowAccess::clock(window);
  const std::vector<std::uint64_t> keys = summed_keys({&source, 1});
  const std::vector<std::uint64_t> none(keys.size(), 0);
  std::vector<WindowShard> shards;
  shards.reserve(num_shards);
  for (std::uint32_t i = 0; i < num_shards; ++i) {
    WindowShard& shard = shards.emplace_back(config, i, num_shards, options);
    WindowedFilter& local = WindowShardAccess::local(shard);
    copy_blocks(config, {&source, 1}, {&whole, 1}, shard.blocks(), local, i == 0 ? keys : none);
    WindowAccess::set_clock(local, clock_for_shard(clock, config, i));
  }
  return shards;
}

WindowedFilter concat(std::span<const WindowShard> shards, const Options& options) {
  const auto sorted = complete_set(shards);
  const WindowAccess::Clock clock = common_clock(sorted);
  const WindowConfig& config = sorted.front()->config();
  std::vector<const WindowedFilter*> sources;
  std::vector<BlockSpan> have;
  for (const WindowShard* shard : sorted) {
    sources.push_back(&WindowShardAccess::local(*shard));
    have.push_back(shard->blocks());
  }
  WindowedFilter window(config, options);
  copy_blocks(config, sources, have, {0, config.generation.num_blocks}, window,
              summed_keys(sources));
  WindowAccess::set_clock(window, clock);
  return window;
}

std::vector<WindowShard> reshard(std::span<const WindowShard> shards, std::uint32_t num_shards,
                                 const Options& options) {
  const auto sorted = complete_set(shards);
  const WindowAccess::Clock clock = common_clock(sorted);
  const WindowConfig& config = sorted.front()->config();
  shard_blocks(config.generation.num_blocks, 0, num_shards);  // checks the shard count
  std::vector<const WindowedFilter*> sources;
  std::vector<BlockSpan> have;
  for (const WindowShard* shard : sorted) {
    sources.push_back(&WindowShardAccess::local(*shard));
    have.push_back(shard->blocks());
  }
  const std::vector<std::uint64_t> keys = summed_keys(sources);
  const std::vector<std::uint64_t> none(keys.size(), 0);
  std::vector<WindowShard> result;
  result.reserve(num_shards);
  for (std::uint32_t j = 0; j < num_shards; ++j) {
    WindowShard& shard = result.emplace_back(config, j, num_shards, options);
    WindowedFilter& local = WindowShardAccess::local(shard);
    copy_blocks(config, sources, have, shard.blocks(), local, j == 0 ? keys : none);
    WindowAccess::set_clock(local, clock_for_shard(clock, config, j));
  }
  return result;
}

}  // namespace bulkbloom
