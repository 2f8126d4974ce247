// The sliding window: a ring of generations, the clocks that rotate it, and dedup over the union.
// The rules and their reasons are in docs/WINDOW.md.
#include "bulkbloom/window.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <type_traits>

#include "core/filter_access.hpp"
#include "core/key_hash.hpp"
#include "core/span_checks.hpp"
#include "core/tuning.hpp"
#include "persist/incremental_detail.hpp"
#include "registry/backend.hpp"
#include "shard/shard_math.hpp"
#include "window/window_access.hpp"
#include "window/window_clock.hpp"

namespace bulkbloom {
namespace {

using detail::check_size;
using detail::FilterAccess;
using detail::KeyMode;
using detail::tuning::kMinParallelKeys;
using detail::tuning::kWindowHashChunk;

// Bound on T + L, so that period arithmetic and G·period fit an int64 with room to spare.
constexpr std::uint64_t kMaxSpan = std::uint64_t{1} << 61;
// Most filters one generation is made of (growth at a run's start seals the one before).
constexpr std::size_t kMaxSealedParts = 8;

// Buffers a thread reuses from call to call, at most kWindowHashChunk entries each. Fresh ones cost
// a page fault per 4 KiB on every call and, as vectors, a pass of zeroing, a visible share of a
// window's dedup time in a profile (bench/DECISIONS.md). Per thread, since const calls may
// come from several threads at once.
struct Scratch {
  std::unique_ptr<std::uint64_t[]> hashes;   // a chunk's hashes
  std::unique_ptr<std::uint64_t[]> pending;  // clear_found: hashes still absent
  std::unique_ptr<std::uint32_t[]> index;    // clear_found: their positions in the chunk
  std::unique_ptr<std::uint8_t[]> found;     // clear_found: one generation's answers
  std::unique_ptr<std::uint64_t[]> moved;    // a window shard's hashes for one filter's blocks

  // The scratch of the calling thread, with room for kWindowHashChunk entries.
  static Scratch& of_this_thread() {
    thread_local Scratch scratch;
    if (!scratch.hashes) {
      scratch.hashes = std::make_unique_for_overwrite<std::uint64_t[]>(kWindowHashChunk);
      scratch.pending = std::make_unique_for_overwrite<std::uint64_t[]>(kWindowHashChunk);
      scratch.index = std::make_unique_for_overwrite<std::uint32_t[]>(kWindowHashChunk);
      scratch.found = std::make_unique_for_overwrite<std::uint8_t[]>(kWindowHashChunk);
      scratch.moved = std::make_unique_for_overwrite<std::uint64_t[]>(kWindowHashChunk);
    }
    return scratch;
  }
};

// Hands the layout hashes of `keys` to `consume(hashes, offset)` chunk by chunk, in order.
// uint64_t keys are hashed by `host`'s kernels, byte strings one at a time.
template <typename Key, typename Consume>
void for_each_hashed_chunk(std::span<const Key> keys, const Layout& layout,
                           const detail::HostKernels& host, Consume&& consume) {
  constexpr bool kByteKeys = std::is_same_v<Key, std::string_view>;
  if constexpr (kByteKeys) detail::check_byte_keys_allowed(layout);
  std::uint64_t* const hashes = Scratch::of_this_thread().hashes.get();
  for (std::size_t offset = 0; offset < keys.size(); offset += kWindowHashChunk) {
    const std::size_t n = std::min(kWindowHashChunk, keys.size() - offset);
    if constexpr (kByteKeys) {
      for (std::size_t i = 0; i < n; ++i) {
        hashes[i] = detail::xxh64_bytes(keys[offset + i], layout.seed);
      }
    } else {
      host.hash(layout, keys.data() + offset, n, KeyMode::hash_with_layout, hashes);
    }
    consume(std::span<const std::uint64_t>(hashes, n), offset);
  }
}

// The host side of a window's implementation: all its generations are made with the same
// options, so any one of them answers for all.
const detail::HostSide& host_of(const std::vector<Filter>& ring) {
  return FilterAccess::engine(ring.front()).host();
}

// For each i with absent[i] == 1, looks the hash up in `filters` in order and sets absent[i] = 0
// at the first that may contain it. Only the still-absent keys are looked up in each filter, so a
// key found in a recent generation costs no further reads. Returns how many stay absent.
// `hashes` holds at most kWindowHashChunk entries. A window shard's hashes are the whole window's,
// moved by `move` into each filter's blocks (src/shard/shard_math.hpp).
//
// The lists of keys still pending are compacted by `host`'s kernels, without a branch per key
// (whether a key was found is as unpredictable as the traffic's repeats), and `absent` is written
// once at the end rather than after every filter.
std::uint64_t clear_found(const detail::HostKernels& host, std::span<const Filter* const> filters,
                          std::span<const std::uint64_t> hashes, std::uint8_t* absent,
                          const detail::ShardHashes* move) {
  Scratch& scratch = Scratch::of_this_thread();
  std::uint32_t* const index = scratch.index.get();
  std::uint64_t* const pending = scratch.pending.get();
  std::uint8_t* const found = scratch.found.get();
  std::size_t count = 0;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    index[count] = static_cast<std::uint32_t>(i);
    pending[count] = hashes[i];
    count += absent[i] != 0 ? 1 : 0;
  }
  for (const Filter* filter : filters) {
    if (count == 0) break;
    const std::uint64_t* looked_up = pending;
    if (move != nullptr) {
      move->move(filter->layout().num_blocks, {pending, count}, scratch.moved.get());
      looked_up = scratch.moved.get();
    }
    FilterAccess::engine(*filter).contains({looked_up, count}, KeyMode::prehashed, {found, count});
    count = host.keep_not_found(found, index, pending, count);
  }
  std::fill(absent, absent + hashes.size(), std::uint8_t{0});
  for (std::size_t j = 0; j < count; ++j) absent[index[j]] = 1;
  return count;
}

// clear_found over `hashes` cut into one slice per worker of `host`, each slice looked up in
// every filter on one thread. Splitting each filter's lookup between the threads instead handed
// every list of pending keys and every answer from core to core, which measured slower than one
// thread on a window in the caches (bench/DECISIONS.md).
std::uint64_t clear_found_in_slices(const detail::HostSide& host,
                                    std::span<const Filter* const> filters,
                                    std::span<const std::uint64_t> hashes, std::uint8_t* absent,
                                    const detail::ShardHashes* move) {
  const unsigned slices = hashes.size() >= kMinParallelKeys ? host.workers->size() : 1;
  if (slices <= 1) return clear_found(*host.kernels, filters, hashes, absent, move);
  std::vector<std::uint64_t> remaining(slices);
  host.workers->run(slices, [&](unsigned slice) {
    const std::size_t begin = hashes.size() * slice / slices;
    const std::size_t end = hashes.size() * (slice + 1) / slices;
    remaining[slice] = clear_found(*host.kernels, filters, hashes.subspan(begin, end - begin),
                                   absent + begin, move);
  });
  std::uint64_t total = 0;
  for (const std::uint64_t r : remaining) total += r;
  return total;
}

}  // namespace

std::uint64_t WindowConfig::period() const {
  const std::uint64_t span = window + lateness;
  if (generations < 2) return span;  // an invalid config; validate() names the problem
  return (span + generations - 2) / (generations - 1);
}

std::uint64_t WindowConfig::forget_after() const {
  return period() * generations;
}

double WindowConfig::generation_fpr() const {
  if (fpr == 0.0 || generations == 0) return 0.0;
  return -std::expm1(std::log1p(-fpr) / generations);
}

double WindowConfig::expected_fpr(std::uint64_t keys_per_generation) const {
  return -std::expm1(generations * std::log1p(-generation.expected_fpr(keys_per_generation)));
}

void WindowConfig::validate() const {
  if (clock != WindowClock::records && clock != WindowClock::event_time) {
    throw std::invalid_argument("window clock " + std::to_string(static_cast<int>(clock)) +
                                " is unknown: expected records (0) or event_time (1)");
  }
  if (generations < 2 || generations > kMaxGenerations) {
    throw std::invalid_argument("window generations " + std::to_string(generations) +
                                " is out of range: expected 2 to " +
                                std::to_string(kMaxGenerations));
  }
  if (window == 0) throw std::invalid_argument("window length 0 is too short: expected at least 1");
  if (clock == WindowClock::records && lateness != 0) {
    throw std::invalid_argument("lateness " + std::to_string(lateness) +
                                " applies to event_time windows only; a records window needs 0");
  }
  if (window > kMaxSpan || lateness > kMaxSpan - window) {
    throw std::invalid_argument("window " + std::to_string(window) + " plus lateness " +
                                std::to_string(lateness) + " exceeds the limit of " +
                                std::to_string(kMaxSpan) + " clock units");
  }
  if (!(fpr == 0.0 || (fpr > 0.0 && fpr < 1.0))) {
    throw std::invalid_argument("window false-positive rate " + std::to_string(fpr) +
                                " is out of range: expected 0 < fpr < 1 (or 0: not known)");
  }
  generation.validate();
  if (block_multiple == 0 || block_multiple > Layout::kMaxBlocks ||
      generation.num_blocks % block_multiple != 0) {
    throw std::invalid_argument("window block multiple " + std::to_string(block_multiple) +
                                " does not divide the generation's " +
                                std::to_string(generation.num_blocks) +
                                " blocks: expected a divisor of them, at least 1");
  }
}

WindowConfig WindowConfig::shardable_by(std::uint32_t num_shards) const {
  validate();
  if (num_shards == 0) throw std::invalid_argument("shard count 0: expected at least 1");
  const std::uint64_t multiple = std::lcm(std::uint64_t{block_multiple}, num_shards);
  const std::uint64_t blocks = (generation.num_blocks + multiple - 1) / multiple * multiple;
  if (blocks > Layout::kMaxBlocks) {
    throw std::invalid_argument("a window of " + std::to_string(generation.num_blocks) +
                                " blocks a generation cannot be made shardable by " +
                                std::to_string(num_shards) + ": its block counts would be " +
                                "multiples of " + std::to_string(multiple) + ", beyond " +
                                std::to_string(Layout::kMaxBlocks) + " blocks");
  }
  WindowConfig config = *this;
  config.block_multiple = static_cast<std::uint32_t>(multiple);
  config.generation.num_blocks = blocks;
  return config;
}

std::string WindowConfig::describe() const {
  const char* clock_name = clock == WindowClock::records ? "records" : "event_time";
  std::string text = std::string(clock_name) + " window " + std::to_string(window);
  if (lateness != 0) text += " + lateness " + std::to_string(lateness);
  const double mib = static_cast<double>(memory_bytes()) / double(1 << 20);
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f MiB", mib);
  std::string promise;
  if (fpr != 0.0) {
    char rate[48];
    std::snprintf(rate, sizeof rate, ", promised false-positive rate %.3g", fpr);
    promise = rate;
  }
  if (block_multiple != 1) {
    promise += ", block counts multiples of " + std::to_string(block_multiple);
  }
  return text + " over " + std::to_string(generations) + " generations (rotation every " +
         std::to_string(period()) + ", forgotten after " + std::to_string(forget_after()) +
         "), each at least " + generation.describe() + "; " + memory + " in all at that size" +
         promise;
}

namespace {

// Sizes `config`'s generations for `records_per_unit` records per clock unit at a union FPR of
// `fpr` when all G generations are full.
WindowConfig sized(WindowConfig config, double records_per_unit, double fpr) {
  config.validate();
  if (!(fpr > 0.0 && fpr < 1.0)) {
    throw std::invalid_argument("window false-positive rate " + std::to_string(fpr) +
                                " is out of range: expected 0 < fpr < 1");
  }
  const double records = records_per_unit * static_cast<double>(config.period());
  if (!(records_per_unit > 0.0) || !(records < 0x1p63)) {
    throw std::invalid_argument("records per clock unit " + std::to_string(records_per_unit) +
                                " is out of range: expected > 0 and under 2^63 per period");
  }
  // The union of G generations at fpr_g each is 1 - (1 - fpr_g)^G; solve for fpr_g.
  config.fpr = fpr;
  config.generation =
      Layout::for_capacity(static_cast<std::uint64_t>(std::ceil(records)), config.generation_fpr());
  return config;
}

// 1 − Π(1 − rate), without the cancellation of 1 − (a product near 1) for small rates.
double union_fpr(std::span<const double> rates) {
  double log_none_claims = 0.0;
  for (const double rate : rates) log_none_claims += std::log1p(-rate);
  return -std::expm1(log_none_claims);
}

// The most keys `layout` holds at `fpr` by the model (0 when fpr is 0: not known).
std::uint64_t capacity_at(const Layout& layout, double fpr) {
  if (fpr == 0.0 || layout.expected_fpr(1) > fpr) return 0;
  std::uint64_t low = 1, high = 2;  // expected_fpr(low) <= fpr < expected_fpr(high)
  while (layout.expected_fpr(high) <= fpr) {
    low = high;
    if (high > (std::uint64_t{1} << 62)) return high;
    high *= 2;
  }
  while (high - low > 1) {
    const std::uint64_t mid = low + (high - low) / 2;
    (layout.expected_fpr(mid) <= fpr ? low : high) = mid;
  }
  return low;
}

}  // namespace

std::uint64_t WindowConfig::keys_within(std::uint64_t blocks) const {
  Layout bounded = generation;
  bounded.num_blocks = blocks / block_multiple * block_multiple;
  if (bounded.num_blocks == 0) return 0;
  // Any count of keys up to it is sized (Layout::for_capacity) at no more blocks than `bounded`
  // has, and rounding up to the block multiple stays within them.
  return capacity_at(bounded, generation_fpr());
}

WindowConfig WindowConfig::for_records(std::uint64_t window_records, double fpr,
                                       std::uint32_t generations) {
  WindowConfig config;
  config.clock = WindowClock::records;
  config.window = window_records;
  config.generations = generations;
  return sized(config, 1.0, fpr);
}

WindowConfig WindowConfig::for_event_time(double records_per_unit, std::uint64_t window, double fpr,
                                          std::uint32_t generations, std::uint64_t lateness) {
  WindowConfig config;
  config.clock = WindowClock::event_time;
  config.window = window;
  config.generations = generations;
  config.lateness = lateness;
  return sized(config, records_per_unit, fpr);
}

WindowedFilter::WindowedFilter(const WindowConfig& config, const Options& options)
    : WindowedFilter(config, options, true) {}

WindowedFilter::WindowedFilter(const WindowConfig& config, const Options& options, bool write)
    : config_(config), options_(options), whole_generation_(config.generation) {
  config_.validate();
  configured_capacity_ = capacity_at(config_.generation, config_.generation_fpr());
  ring_.reserve(config_.generations);
  for (std::uint32_t g = 0; g < config_.generations; ++g) {
    // Written once here so that its pages are faulted in now: a generation whose first write
    // were the clear of a rotation would fault them in on the call that crosses the boundary, many
    // times slower than clearing memory in place, and the window holds what memory_bytes() says
    // from the start. A restored window's fill is that write (a new filter is all zero).
    Filter& generation = ring_.emplace_back(config_.generation, options);
    if (write) generation.clear();
  }
  keys_.assign(config_.generations, 0);
  window_keys_.assign(config_.generations, 0);
  capacity_.assign(config_.generations, configured_capacity_);
  overfull_.assign(config_.generations, false);
  sealed_.resize(config_.generations);
  started_ = config_.clock == WindowClock::records;
}

WindowedFilter::WindowedFilter(WindowedFilter&&) noexcept = default;
WindowedFilter& WindowedFilter::operator=(WindowedFilter&&) noexcept = default;
WindowedFilter::~WindowedFilter() = default;

void WindowedFilter::require_generations(const char* call) const {
  // A moved-from window's ring is empty; say so rather than index nothing.
  if (ring_.empty()) {
    throw std::logic_error(std::string("bulkbloom::WindowedFilter::") + call +
                           " on a window that was moved from");
  }
}

std::string WindowedFilter::implementation() const {
  require_generations("implementation");
  return ring_.front().implementation();
}

void WindowedFilter::require_clock(WindowClock clock, const char* call) const {
  if (config_.clock == clock) return;
  throw std::invalid_argument(std::string(call) + " needs a window with the " +
                              (clock == WindowClock::records
                                   ? "records clock; this window runs on event time (pass times)"
                                   : "event_time clock; this window counts records (pass no "
                                     "times)"));
}

// Hashes the keys once, chunk by chunk, and dedups each chunk's hashes in order.
template <typename Key>
std::uint64_t WindowedFilter::dedup_keys(std::span<const Key> keys,
                                         std::span<const std::int64_t> times,
                                         std::span<std::uint8_t> is_new) {
  require_generations("insert_if_absent");
  check_size(keys.size(), is_new.size(), "insert_if_absent: is_new span");
  std::uint64_t fresh = 0;
  for_each_hashed_chunk(
      keys, config_.generation, *host_of(ring_).kernels, [&](auto hashes, std::size_t offset) {
        const auto chunk_times = times.empty() ? times : times.subspan(offset, hashes.size());
        fresh += dedup_hashes(hashes, chunk_times, is_new.data() + offset);
      });
  return fresh;
}

template <typename Key>
void WindowedFilter::contains_keys(std::span<const Key> keys, std::span<std::uint8_t> out) const {
  require_generations("contains");
  check_size(keys.size(), out.size(), "contains: output span");
  for_each_hashed_chunk(
      keys, config_.generation, *host_of(ring_).kernels,
      [&](auto hashes, std::size_t offset) { contains_hashes(hashes, out.data() + offset); });
}

std::uint64_t WindowedFilter::insert_if_absent(std::span<const std::uint64_t> keys,
                                               std::span<std::uint8_t> is_new) {
  require_clock(WindowClock::records, "insert_if_absent without times");
  return dedup_keys(keys, {}, is_new);
}

std::uint64_t WindowedFilter::insert_if_absent(std::span<const std::string_view> keys,
                                               std::span<std::uint8_t> is_new) {
  require_clock(WindowClock::records, "insert_if_absent without times");
  return dedup_keys(keys, {}, is_new);
}

std::uint64_t WindowedFilter::insert_if_absent(std::span<const std::uint64_t> keys,
                                               std::span<const std::int64_t> times,
                                               std::span<std::uint8_t> is_new) {
  require_clock(WindowClock::event_time, "insert_if_absent with times");
  check_size(keys.size(), times.size(), "insert_if_absent: times span");
  return dedup_keys(keys, times, is_new);
}

std::uint64_t WindowedFilter::insert_if_absent(std::span<const std::string_view> keys,
                                               std::span<const std::int64_t> times,
                                               std::span<std::uint8_t> is_new) {
  require_clock(WindowClock::event_time, "insert_if_absent with times");
  check_size(keys.size(), times.size(), "insert_if_absent: times span");
  return dedup_keys(keys, times, is_new);
}

void WindowedFilter::contains(std::span<const std::uint64_t> keys,
                              std::span<std::uint8_t> out) const {
  contains_keys(keys, out);
}

void WindowedFilter::contains(std::span<const std::string_view> keys,
                              std::span<std::uint8_t> out) const {
  contains_keys(keys, out);
}

bool WindowedFilter::contains(std::uint64_t key) const {
  std::uint8_t flag = 0;
  contains(std::span<const std::uint64_t>(&key, 1), std::span<std::uint8_t>(&flag, 1));
  return flag != 0;
}

void WindowedFilter::advance_to(std::int64_t time) {
  require_clock(WindowClock::event_time, "advance_to");
  require_generations("advance_to");
  move_clock(time);
}

std::optional<std::int64_t> WindowedFilter::clock_time() const {
  if (config_.clock != WindowClock::event_time || !started_) return std::nullopt;
  return clock_time_;
}

const Filter& WindowedFilter::generation(std::uint32_t age) const {
  require_generations("generation");
  if (age >= config_.generations) {
    throw std::invalid_argument("generation age " + std::to_string(age) +
                                " is out of range: this window has " +
                                std::to_string(config_.generations) + " generations");
  }
  return ring_[(newest_ + config_.generations - age) % config_.generations];
}

double WindowedFilter::current_fpr() const {
  require_generations("current_fpr");
  std::vector<double> rates;
  for (std::uint32_t slot = 0; slot < config_.generations; ++slot) {
    rates.push_back(ring_[slot].current_fpr());
    for (const SealedPart& part : sealed_[slot]) rates.push_back(part.filter.current_fpr());
  }
  return union_fpr(rates);
}

std::uint64_t WindowedFilter::slot_of(std::uint32_t age) const {
  generation(age);  // checks the age
  return (newest_ + config_.generations - age) % config_.generations;
}

std::uint64_t WindowedFilter::generation_keys(std::uint32_t age) const {
  const std::uint64_t slot = slot_of(age);
  std::uint64_t keys = keys_[slot];
  for (const SealedPart& part : sealed_[slot]) keys += part.keys;
  return keys;
}

std::uint64_t WindowedFilter::generation_capacity(std::uint32_t age) const {
  return capacity_[slot_of(age)];
}

std::uint64_t WindowedFilter::generation_memory(std::uint32_t age) const {
  const std::uint64_t slot = slot_of(age);
  std::uint64_t bytes = ring_[slot].layout().size_bytes();
  for (const SealedPart& part : sealed_[slot]) bytes += part.filter.layout().size_bytes();
  return bytes;
}

std::uint64_t WindowedFilter::memory_bytes() const {
  std::uint64_t bytes = 0;
  for (std::uint32_t slot = 0; slot < config_.generations; ++slot) {
    bytes += ring_[slot].layout().size_bytes();
    for (const SealedPart& part : sealed_[slot]) bytes += part.filter.layout().size_bytes();
  }
  return bytes;
}

void WindowedFilter::set_sizing(const WindowSizing& sizing) {
  if (sizing.max_keys != 0 && sizing.max_keys < sizing.min_keys) {
    throw std::invalid_argument("window sizing: at most " + std::to_string(sizing.max_keys) +
                                " keys per generation is below the least, " +
                                std::to_string(sizing.min_keys));
  }
  sizing_ = sizing;
  const std::uint64_t wanted =
      sizing_.max_keys == 0 ? sizing_.min_keys : std::min(sizing_.min_keys, sizing_.max_keys);
  if (config_.fpr != 0.0 && !ring_.empty() && wanted > capacity_[newest_]) grow_newest(wanted);
}

// The rate left for the filter taking a slot's keys: its period's filters together stay at the
// generation rate, 1 − (1 − fpr_g) / Π(1 − rate of each sealed filter at its keys).
double WindowedFilter::open_rate(std::uint32_t slot) const {
  double log_left = std::log1p(-config_.generation_fpr());
  for (const SealedPart& part : sealed_[slot]) {
    log_left -= std::log1p(-whole_layout(part.filter.layout()).expected_fpr(part.window_keys));
  }
  return -std::expm1(log_left);
}

// The newest generation is sized for fewer keys than a run expects: an empty one is replaced,
// one that holds keys is sealed and a larger filter takes the rest of its period.
// A window shard decides as the whole window does, from the whole window's keys: it seals a
// filter of its blocks that holds none of its own keys when the whole window's holds keys.
void WindowedFilter::grow_newest(std::uint64_t keys) {
  if (keys_[newest_] == 0 && window_keys_[newest_] == 0) {
    ring_[newest_] = Filter(layout_for(keys, open_rate(newest_)), options_);
    restart_log();
  } else {
    if (sealed_[newest_].size() + 1 >= kMaxSealedParts) return;  // reported as overfull
    sealed_[newest_].push_back({std::move(ring_[newest_]), keys_[newest_], window_keys_[newest_]});
    const double rate = open_rate(newest_);
    if (rate <= 0.0) {  // the sealed filters took the period's whole rate: nothing left to grow
      ring_[newest_] = std::move(sealed_[newest_].back().filter);
      sealed_[newest_].pop_back();
      return;
    }
    close_log(sealed_[newest_].back().filter, newest_epoch_,
              static_cast<std::uint32_t>(sealed_[newest_].size() - 1));
    ring_[newest_] = Filter(layout_for(keys, rate), options_);
    keys_[newest_] = 0;
    window_keys_[newest_] = 0;
    restart_log();
  }
  capacity_[newest_] = capacity_at(whole_layout(ring_[newest_].layout()), open_rate(newest_));
  overfull_[newest_] = false;
}

// The whole window's layout of a filter of this window (of a shard's blocks, or its own).
Layout WindowedFilter::whole_layout(const Layout& layout) const {
  if (shard_hashes_ == nullptr) return layout;
  Layout whole = whole_generation_;
  whole.num_blocks = shard_hashes_->whole_blocks(layout.num_blocks);
  return whole;
}

// The hashes as `filter` takes them: as given, or a window shard's moved into its blocks of the
// filter's generation, in this thread's scratch (at most kWindowHashChunk of them).
std::span<const std::uint64_t> WindowedFilter::hashes_for(
    const Filter& filter, std::span<const std::uint64_t> hashes) const {
  if (shard_hashes_ == nullptr) return hashes;
  std::uint64_t* const moved = Scratch::of_this_thread().moved.get();
  shard_hashes_->move(filter.layout().num_blocks, hashes, moved);
  return {moved, hashes.size()};
}

// The configured layout with the blocks for `keys` at `rate`, never fewer than configured, a
// multiple of the block multiple; a window shard's share of the whole window's such layout.
Layout WindowedFilter::layout_for(std::uint64_t keys, double rate) const {
  const Layout& asked = whole_generation_;
  std::uint64_t blocks = asked.num_blocks;
  try {
    blocks = std::max(blocks, Layout::for_capacity(asked.shape, std::max<std::uint64_t>(keys, 1),
                                                   rate, asked.hash, asked.seed, asked.index)
                                  .num_blocks);
  } catch (const std::invalid_argument&) {
    blocks = Layout::kMaxBlocks;  // the largest generation a layout can have
  }
  const std::uint64_t multiple = std::uint64_t{config_.block_multiple} * parts_;
  blocks = std::min((blocks + multiple - 1) / multiple, Layout::kMaxBlocks / multiple) * multiple;
  Layout layout = config_.generation;
  layout.num_blocks = blocks / parts_;
  return layout;
}

// The layout of a generation about to start: sized for the most keys a generation of the window
// took in its period (the periods before it), bounded by the sizing, never below the
// configuration's. A window whose promise is not known keeps the configured layout.
Layout WindowedFilter::next_generation_layout() const {
  if (config_.fpr == 0.0) return config_.generation;
  std::uint64_t keys = sizing_.min_keys;
  for (std::uint32_t slot = 0; slot < config_.generations; ++slot) {
    std::uint64_t generation = window_keys_[slot];
    for (const SealedPart& part : sealed_[slot]) generation += part.window_keys;
    keys = std::max(keys, generation);
  }
  if (sizing_.max_keys != 0) keys = std::min(keys, sizing_.max_keys);
  if (keys <= configured_capacity_) return config_.generation;
  return layout_for(keys, config_.generation_fpr());
}

// Clears slot `slot` for a new period, with `layout` (a new filter if the size changes).
void WindowedFilter::start_generation(std::uint32_t slot, const Layout& layout) {
  if (ring_[slot].layout() == layout) {
    ring_[slot].clear();
  } else {
    ring_[slot] = Filter(layout, options_);
  }
  reset_generation(slot, layout);
}

// Generation `slot`, all zero with `layout`, starts its period: no keys, no sealed filters.
void WindowedFilter::reset_generation(std::uint32_t slot, const Layout& layout) {
  keys_[slot] = 0;
  window_keys_[slot] = 0;
  capacity_[slot] = layout == config_.generation
                        ? configured_capacity_
                        : capacity_at(whole_layout(layout), config_.generation_fpr());
  overfull_[slot] = false;
  sealed_[slot].clear();
  restart_log();
}

// `closed`, which covers part `part` of period `period`, stops being open: its log is kept for
// the next take (closed_logs_), without the logs of filters the window no longer holds.
void WindowedFilter::close_log(const Filter& closed, std::int64_t period, std::uint32_t part) {
  if (!logging_) return;
  const std::int64_t oldest_held = period - static_cast<std::int64_t>(config_.generations) + 1;
  std::erase_if(closed_logs_, [&](const ClosedPart& log) { return log.id.period < oldest_held; });
  // A dropped log is empty already (drop_log_past).
  closed_logs_.push_back({{period, part, closed.layout().num_blocks},
                          detail::log_change(log_from_empty_, log_dropped_),
                          std::move(change_log_)});
}

// The open filter changed (a new period, or a larger filter for this one): what was logged went
// into a filter that is no longer open (close_log() kept it when that filter stays), and the new
// one starts empty.
void WindowedFilter::restart_log() {
  if (!logging_) return;
  change_log_.clear();
  log_from_empty_ = true;
  log_dropped_ = false;
}

// Splits the chunk where the window rotates and dedups each piece against a fixed set of older
// generations: records clock, at multiples of period() records; event time, before each record
// whose period lies after the newest generation's.
std::uint64_t WindowedFilter::dedup_hashes(std::span<const std::uint64_t> hashes,
                                           std::span<const std::int64_t> times,
                                           std::uint8_t* is_new) {
  const std::uint64_t period = config_.period();
  std::uint64_t fresh = 0;
  std::size_t begin = 0;
  while (begin < hashes.size()) {
    std::size_t end = begin + 1;
    if (config_.clock == WindowClock::records) {
      rotate_to_epoch(static_cast<std::int64_t>(records_seen_ / period));
      const std::uint64_t room = period - records_seen_ % period;
      end = begin + static_cast<std::size_t>(std::min<std::uint64_t>(room, hashes.size() - begin));
    } else {
      move_clock(times[begin]);
      while (end < hashes.size() && detail::period_of(times[end], period) <= newest_epoch_) {
        clock_time_ = std::max(clock_time_, times[end]);
        ++end;
      }
    }
    fresh += dedup_segment(hashes.subspan(begin, end - begin), is_new + begin);
    records_seen_ += end - begin;
    begin = end;
  }
  return fresh;
}

// Within a segment the older generations do not change, so the sequential loop's answer is
// "new in the newest generation (which takes every record) and in no older one".
//
// It also keeps the statistics: the newest generation's keys (those new to it set its bits),
// whether it went over its capacity, and the false drops expected over the segment.
std::uint64_t WindowedFilter::dedup_segment(std::span<const std::uint64_t> hashes,
                                            std::uint8_t* is_new) {
  const std::uint64_t keys_before = keys_[newest_];
  // As the open filter takes them (a sized window shard's moved into its blocks): what the log
  // holds, so that replaying it into that filter sets the same bits.
  const std::span<const std::uint64_t> taken = hashes_for(ring_[newest_], hashes);
  const std::uint64_t fresh_in_newest =
      FilterAccess::engine(ring_[newest_])
          .insert_if_absent(taken, KeyMode::prehashed, {is_new, hashes.size()});
  if (fresh_in_newest == 0) return 0;
  // Only the keys new to the open filter set bits in it (a key it held sets none).
  if (logging_ && !log_dropped_) {
    for (std::size_t i = 0; i < taken.size(); ++i) {
      if (is_new[i] != 0) change_log_.push_back(taken[i]);
    }
    log_dropped_ =
        detail::drop_log_past(change_log_, ring_[newest_].layout().size_bytes(), closed_logs_);
  }
  keys_[newest_] += fresh_in_newest;
  window_keys_[newest_] += parts_ * fresh_in_newest;
  const std::uint64_t capacity = capacity_[newest_];
  if (capacity != 0 && window_keys_[newest_] > capacity && !overfull_[newest_]) {
    overfull_[newest_] = true;
    ++overfull_count_;
    last_overfull_ = OverfullGeneration{newest_epoch_, window_keys_[newest_], capacity};
  }
  std::vector<const Filter*> older;
  for (const SealedPart& part : sealed_[newest_]) older.push_back(&part.filter);
  for (std::uint32_t age = 1; age < config_.generations; ++age) {
    older.push_back(&generation(age));
    for (const SealedPart& part : sealed_[slot_of(age)]) older.push_back(&part.filter);
  }
  const std::uint64_t fresh =
      clear_found_in_slices(host_of(ring_), older, hashes, is_new, shard_hashes_.get());
  expected_false_drops_ += static_cast<double>(fresh) * drop_odds(keys_before, keys_[newest_]);
  return fresh;
}

// The mean of rate / (1 − rate) over a segment in which the newest generation went from
// `keys_before` to `keys_after` keys and nothing else changed: a never-seen key is reported new
// with probability 1 − rate, so each kept record stands for 1 / (1 − rate) never-seen keys,
// rate of them dropped. The rate climbs convexly with the newest generation's keys, so it is
// averaged at the midpoints of kOddsSteps equal steps of them, not at the two ends.
double WindowedFilter::drop_odds(std::uint64_t keys_before, std::uint64_t keys_after) const {
  constexpr int kOddsSteps = 8;
  double log_older_clear = 0.0;  // log of the chance that no filter but the newest claims a key
  for (std::uint32_t slot = 0; slot < config_.generations; ++slot) {
    if (slot != newest_) log_older_clear += std::log1p(-ring_[slot].expected_fpr(keys_[slot]));
    for (const SealedPart& part : sealed_[slot]) {
      log_older_clear += std::log1p(-part.filter.expected_fpr(part.keys));
    }
  }
  const Filter& newest = ring_[newest_];
  const double span = static_cast<double>(keys_after - keys_before);
  double sum = 0.0;
  for (int step = 0; step < kOddsSteps; ++step) {
    const double keys = static_cast<double>(keys_before) + span * (step + 0.5) / kOddsSteps;
    const double clear =
        std::exp(log_older_clear + std::log1p(-newest.expected_fpr(std::llround(keys))));
    sum += (1.0 - clear) / clear;
  }
  return sum / kOddsSteps;
}

void WindowedFilter::contains_hashes(std::span<const std::uint64_t> hashes,
                                     std::uint8_t* out) const {
  std::vector<const Filter*> all;
  for (std::uint32_t age = 0; age < config_.generations; ++age) {
    all.push_back(&generation(age));
    for (const SealedPart& part : sealed_[slot_of(age)]) all.push_back(&part.filter);
  }
  std::fill(out, out + hashes.size(), std::uint8_t{1});
  // out[i] now says "absent"
  clear_found_in_slices(host_of(ring_), all, hashes, out, shard_hashes_.get());
  for (std::size_t i = 0; i < hashes.size(); ++i) out[i] ^= 1;
}

void WindowedFilter::move_clock(std::int64_t time) {
  clock_time_ = started_ ? std::max(clock_time_, time) : time;
  rotate_to_epoch(detail::period_of(clock_time_, config_.period()));
}

// Each period the newest generation moves on: the oldest is cleared and becomes the newest. A
// jump of G or more periods clears every generation once. Which slot of the ring is the newest
// after such a jump does not matter: every generation is empty, and files keep them by age.
void WindowedFilter::rotate_to_epoch(std::int64_t epoch) {
  if (!started_) {
    started_ = true;
    newest_epoch_ = epoch;
    restart_log();  // the open filter (empty: nothing came before) now covers `epoch`
    return;
  }
  if (epoch <= newest_epoch_) return;
  const std::uint64_t steps =
      static_cast<std::uint64_t>(epoch) - static_cast<std::uint64_t>(newest_epoch_);
  const std::uint64_t clears = std::min<std::uint64_t>(steps, config_.generations);
  const Layout layout = next_generation_layout();  // from the periods before the new ones
  for (std::uint64_t c = 0; c < clears; ++c) {
    // The filter closing: the newest before the rotation, then each generation this jump started
    // (the last `clears` periods up to `epoch`, in order).
    const std::int64_t closing =
        c == 0 ? newest_epoch_ : epoch - static_cast<std::int64_t>(clears - c);
    close_log(ring_[newest_], closing, static_cast<std::uint32_t>(sealed_[newest_].size()));
    newest_ = (newest_ + 1) % config_.generations;
    start_generation(newest_, layout);
  }
  // Counted in periods, not clears, so that the count depends only on the first and the current
  // period and not on the steps in between: a window shard that jumps where the whole window
  // stepped (DESIGN §9) keeps the same state.
  rotations_ += steps;
  newest_epoch_ = epoch;
}

std::uint64_t detail::WindowAccess::dedup_at(WindowedFilter& w,
                                             std::span<const std::uint64_t> hashes,
                                             std::span<const std::int64_t> clocks,
                                             std::uint8_t* is_new) {
  w.require_generations("insert_if_absent");
  std::uint64_t fresh = 0;
  for (std::size_t offset = 0; offset < hashes.size(); offset += kWindowHashChunk) {
    const std::size_t n = std::min(kWindowHashChunk, hashes.size() - offset);
    const auto chunk = hashes.subspan(offset, n);
    const auto chunk_clocks = clocks.subspan(offset, n);
    if (w.config_.clock == WindowClock::event_time) {
      fresh += w.dedup_hashes(chunk, chunk_clocks, is_new + offset);
      continue;
    }
    // Records clock: the record at position p is in period p / P, as in dedup_hashes(); the
    // whole window's other records fall between this shard's and only move the clock.
    const std::uint64_t period = w.config_.period();
    std::size_t begin = 0;
    while (begin < n) {
      const std::uint64_t epoch = static_cast<std::uint64_t>(chunk_clocks[begin]) / period;
      w.rotate_to_epoch(static_cast<std::int64_t>(epoch));
      std::size_t end = begin + 1;
      while (end < n && static_cast<std::uint64_t>(chunk_clocks[end]) / period == epoch) ++end;
      fresh += w.dedup_segment(chunk.subspan(begin, end - begin), is_new + offset + begin);
      w.records_seen_ = static_cast<std::uint64_t>(chunk_clocks[end - 1]) + 1;
      begin = end;
    }
  }
  return fresh;
}

std::vector<const Filter*> detail::WindowAccess::oldest_first(const WindowedFilter& w) {
  std::vector<const Filter*> out;
  for (std::uint32_t age = w.config_.generations; age-- > 0;) {
    for (const auto& part : w.sealed_[w.slot_of(age)]) out.push_back(&part.filter);
    out.push_back(&w.generation(age));
  }
  return out;
}

std::vector<detail::WindowAccess::PartRecord> detail::WindowAccess::records_oldest_first(
    const WindowedFilter& w) {
  std::vector<PartRecord> records;
  for (std::uint32_t age = w.config_.generations; age-- > 0;) {
    const std::uint32_t generation = w.config_.generations - 1 - age;
    const std::uint64_t slot = w.slot_of(age);
    for (const auto& part : w.sealed_[slot]) {
      records.push_back({generation, part.filter.layout().num_blocks, part.keys, part.window_keys});
    }
    records.push_back(
        {generation, w.ring_[slot].layout().num_blocks, w.keys_[slot], w.window_keys_[slot]});
  }
  return records;
}

bool detail::WindowAccess::no_bit_set(const Filter& filter) {
  const std::byte* host = FilterAccess::engine(filter).host_bytes();
  if (host == nullptr) return filter.popcount() == 0;
  return std::all_of(host, host + filter.layout().size_bytes(),
                     [](std::byte b) { return b == std::byte{0}; });
}

std::vector<Filter*> detail::WindowAccess::restore_oldest_first(
    WindowedFilter& w, std::span<const PartRecord> records) {
  ring_oldest_first(w);
  std::vector<Filter*> parts;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto slot = static_cast<std::uint32_t>(records[i].generation);
    Layout layout = w.config_.generation;
    layout.num_blocks = records[i].num_blocks;
    const bool open = i + 1 == records.size() || records[i + 1].generation != slot;
    if (!open) {
      w.sealed_[slot].push_back(
          {Filter(layout, w.options_), records[i].keys, records[i].window_keys});
      parts.push_back(&w.sealed_[slot].back().filter);
      continue;
    }
    std::vector<WindowedFilter::SealedPart> sealed = std::move(w.sealed_[slot]);
    // The newly constructed generation is all zero and filled next: not cleared again.
    if (w.ring_[slot].layout() != layout) w.ring_[slot] = Filter(layout, w.options_);
    w.reset_generation(slot, layout);
    w.sealed_[slot] = std::move(sealed);
    w.keys_[slot] = records[i].keys;
    w.window_keys_[slot] = records[i].window_keys;
    if (!w.sealed_[slot].empty()) {
      w.capacity_[slot] = capacity_at(w.whole_layout(layout), w.open_rate(slot));
    }
    w.overfull_[slot] = w.capacity_[slot] != 0 && w.window_keys_[slot] > w.capacity_[slot];
    parts.push_back(&w.ring_[slot]);
  }
  return parts;
}

void detail::WindowAccess::estimate_keys_from_bits(WindowedFilter& w) {
  for (std::uint32_t slot = 0; slot < w.config_.generations; ++slot) {
    const Filter& g = w.ring_[slot];
    w.keys_[slot] = capacity_at(g.layout(), g.current_fpr());
    w.window_keys_[slot] = w.parts_ * w.keys_[slot];
  }
}

void detail::WindowAccess::make_part(WindowedFilter& w, const Layout& whole_generation,
                                     std::uint32_t parts,
                                     std::shared_ptr<const ShardHashes> hashes) {
  w.whole_generation_ = whole_generation;
  w.parts_ = parts;
  w.shard_hashes_ = std::move(hashes);
  w.configured_capacity_ = capacity_at(whole_generation, w.config_.generation_fpr());
  w.capacity_.assign(w.config_.generations, w.configured_capacity_);
}

void detail::WindowAccess::set_window_keys(WindowedFilter& w, std::span<const std::uint64_t> keys) {
  std::size_t i = 0;
  for (std::uint32_t age = w.config_.generations; age-- > 0;) {
    const std::uint64_t slot = w.slot_of(age);
    for (auto& part : w.sealed_[slot]) part.window_keys = keys[i++];
    w.window_keys_[slot] = keys[i++];
  }
}

void detail::WindowAccess::contains_hashes(const WindowedFilter& w,
                                           std::span<const std::uint64_t> hashes,
                                           std::uint8_t* out) {
  w.require_generations("contains");
  for (std::size_t offset = 0; offset < hashes.size(); offset += kWindowHashChunk) {
    const std::size_t n = std::min(kWindowHashChunk, hashes.size() - offset);
    w.contains_hashes(hashes.subspan(offset, n), out + offset);
  }
}

// After n records the newest generation is the period of record n - 1, as dedup_hashes() leaves
// it: the rotation for record n happens when record n comes.
void detail::WindowAccess::advance_records(WindowedFilter& w, std::uint64_t records) {
  w.require_generations("advance_to");
  if (records <= w.records_seen_) return;
  w.rotate_to_epoch(static_cast<std::int64_t>((records - 1) / w.config_.period()));
  w.records_seen_ = records;
}

}  // namespace bulkbloom
