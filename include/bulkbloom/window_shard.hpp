/// @file
/// Window shards (DESIGN §9, docs/WINDOW.md "Shards"): one sliding window cut into S block
/// ranges that live in different processes and give, together, exactly the answers and the bytes
/// of the one window.
///
/// Shard i of S of a WindowConfig holds, in each of the G generations, the blocks
/// shard_blocks(config.generation.num_blocks, i, S) (route keys with shard_of() on
/// config.generation). What a shard cannot see is the window's clock: a single window's clock at
/// a record depends on every record before it, and a shard sees only its own. So a shard never
/// moves its clock from its records alone: the caller passes, with each record, the single
/// window's clock at that record, and moves every shard to the single window's clock with
/// advance_to(). Exactness (proved in docs/WINDOW.md "Shards"):
///
/// - records clock: clocks[i] is the record's position in the whole stream (0 for the first
///   record of the whole window, counting every record of every shard). A shard's positions must
///   increase strictly across its calls. advance_to(n) says "the whole window has processed n
///   records".
/// - event time: clocks[i] lies in the same period as the single window's clock just after record
///   i (the running maximum of all times up to and including it), and no value given to a shard
///   exceeds the single window's clock at that point of the stream. The running maximum itself
///   always qualifies; so does a daily dump's own time when all of a dump's records carry it.
///
/// Under that condition every flag equals the single window's. The state (and so concat()'s
/// bytes) equals the single window's when, in addition, every shard's clock was started in the
/// single window's first period and ends at its clock (on event time: call advance_to() on every
/// shard, before the first batch with the clock of the whole stream's first record and after
/// each batch with the global clock, including shards that got no record; on the records clock:
/// advance_to(total records) after each batch). On event time
/// records_seen() is the shard's own count, and concat() adds them up.
///
/// Sizing (docs/WINDOW.md "Sizing shards"): shards whose window has a known promise (config.fpr)
/// and a block multiple that S divides (WindowConfig::shardable_by) size each generation per
/// period as the single window does, every size a multiple of S so that one routing serves all.
/// A single window sizes from the keys its generations took; a shard sees only its own, so it
/// sizes from the whole window's keys when the caller gives them (set_window_keys(), the sum of
/// every shard's filter_keys()), and from its own keys times S otherwise. Given the whole
/// window's keys whenever the clock is about to enter a new period, and the same set_sizing() as
/// the single window, the shards choose exactly its sizes and concat() gives its bytes. Without
/// them each shard's generations are sized for its own keys at the promised rate; flags stay
/// exact up to false positives, but shards sized apart cannot be joined.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bulkbloom/filter.hpp"
#include "bulkbloom/format.hpp"
#include "bulkbloom/shard.hpp"
#include "bulkbloom/window.hpp"

namespace bulkbloom {

/// Whether `num_shards` shards of `config` size their generations per period (the file
/// comment): its promise is known and `num_shards` divides its block multiple. Otherwise every
/// generation of every shard keeps the configured size.
bool shards_size_per_period(const WindowConfig& config, std::uint32_t num_shards);

/// Shard `index()` of `num_shards()` of a sliding window: the window's G generations, each its
/// blocks() of config().generation, with the window's clock given by the caller (see the file
/// comment). Its bulk calls take only keys it owns: a batch holding another shard's key throws
/// std::invalid_argument naming the key, its shard and both block ranges, before anything is
/// changed. Its place (index(), num_shards(), blocks() of config().generation, in each
/// generation) is its ShardPlacement. Move-only.
class WindowShard : public ShardPlacement {
 public:
  /// An empty shard with an unstarted clock. Throws std::invalid_argument for a bad config or
  /// shard numbers (see shard_blocks), and what the WindowedFilter constructor throws.
  WindowShard(const WindowConfig& config, std::uint32_t index, std::uint32_t num_shards,
              const Options& options = {});

  WindowShard(WindowShard&&) noexcept;
  WindowShard& operator=(WindowShard&&) noexcept;
  WindowShard(const WindowShard&) = delete;
  WindowShard& operator=(const WindowShard&) = delete;
  ~WindowShard();

  /// The configuration of the whole window this shard is part of.
  const WindowConfig& config() const { return config_; }
  /// Bytes of one generation's blocks of this shard at the configured size.
  std::uint64_t generation_bytes() const;
  /// Bytes of all the shard's generations as they are now.
  std::uint64_t memory_bytes() const { return local_.memory_bytes(); }
  /// Whether this shard sizes its generations per period (shards_size_per_period).
  bool sizes_per_period() const { return shards_size_per_period(config_, num_shards()); }
  /// The running implementation, as WindowedFilter::implementation() names it.
  std::string implementation() const;

  /// Dedups `keys` in order against the shard's generations; clocks[i] is the single window's
  /// clock at record i (the file comment says which value that is for each clock). is_new[i] = 1
  /// if no generation held keys[i]; returns the number of 1s. Throws std::invalid_argument,
  /// before anything changes, for a foreign key, spans of different lengths, or (records clock)
  /// positions that do not increase strictly from records_seen().
  std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys,
                                 std::span<const std::int64_t> clocks,
                                 std::span<std::uint8_t> is_new);
  /// As above for byte-string keys (XXH64 with the layout's seed).
  std::uint64_t insert_if_absent(std::span<const std::string_view> keys,
                                 std::span<const std::int64_t> clocks,
                                 std::span<std::uint8_t> is_new);
  /// insert_if_absent() for keys hashed elsewhere: hashes[i] is the 64-bit hash that
  /// config().generation's hash and seed give record i's key (what shard_of() routes by), so that
  /// an engine that computes the same hash itself (Spark's xxhash64 is XXH64 with seed 42) moves 8
  /// bytes a record instead of the key. The flags and state are exactly those of the keys.
  std::uint64_t insert_hashes_if_absent(std::span<const std::uint64_t> hashes,
                                        std::span<const std::int64_t> clocks,
                                        std::span<std::uint8_t> is_new);

  /// Writes 1 to `out[i]` if some generation may contain `keys[i]`. A pure read.
  void contains(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out) const;
  /// contains() for byte strings.
  void contains(std::span<const std::string_view> keys, std::span<std::uint8_t> out) const;

  /// Moves the clock to the single window's clock `clock` with no record, rotating as due:
  /// event time, a time (earlier times change nothing); records clock, the number of records the
  /// whole window has processed (smaller counts change nothing). Throws std::invalid_argument
  /// for a negative record count.
  void advance_to(std::int64_t clock);

  /// Records clock: the whole window's record count as far as this shard knows it. Event time:
  /// the records this shard processed.
  std::uint64_t records_seen() const;
  /// Event-time clock: the largest clock value given, or nothing before the first.
  std::optional<std::int64_t> clock_time() const;
  /// Periods the window's clock has moved on since it started (WindowedFilter::rotations()).
  std::uint64_t rotations() const;
  /// Generation by age (0 the newest): the shard's blocks as a filter of their own, for its
  /// statistics (bytes, popcount, current FPR). Its layout is not config().generation, so it does
  /// not answer for keys: query them through the shard.
  const Filter& generation(std::uint32_t age) const;
  /// False-positive rate of the shard's blocks as they are now: 1 − Π(1 − current_fpr of each
  /// generation). A key's FPR is that of its shard.
  double current_fpr() const;
  /// Keys of the shard's own that generation `age` took in its period, in all its filters.
  std::uint64_t generation_keys(std::uint32_t age) const { return local_.generation_keys(age); }
  /// Keys, the whole window's, that the filter now taking generation `age`'s keys is sized for
  /// (WindowedFilter::generation_capacity()).
  std::uint64_t generation_capacity(std::uint32_t age) const {
    return local_.generation_capacity(age);
  }
  /// Bytes of the shard's blocks of generation `age`, its sealed filters included.
  std::uint64_t generation_memory(std::uint32_t age) const { return local_.generation_memory(age); }

  /// WindowedFilter::set_sizing() in the whole window's keys: give every shard what the single
  /// window would be given. Changes nothing unless sizes_per_period().
  void set_sizing(const WindowSizing& sizing) { local_.set_sizing(sizing); }
  /// The keys each filter of the shard's blocks took (its own), oldest generation first and in
  /// each generation its sealed filters first, as the window file lists the filters.
  std::vector<std::uint64_t> filter_keys() const;
  /// The whole window's block count of each filter, in filter_keys() order.
  std::vector<std::uint64_t> filter_blocks() const;
  /// The whole window's keys in each filter, in filter_keys() order: the sum of every shard's
  /// filter_keys(). The shard sizes from them (and from its own keys since, times S) instead of
  /// its own keys times S. Throws std::invalid_argument, changing nothing, unless `keys` has one
  /// entry per filter.
  void set_window_keys(std::span<const std::uint64_t> keys);
  /// Generations found over their capacity (in the whole window's keys as the shard knows them)
  /// since this object was made or loaded: WindowedFilter::overfull_generations().
  std::uint64_t overfull_generations() const { return local_.overfull_generations(); }
  /// WindowedFilter::expected_false_drops() of the shard's own records, at its blocks' rate.
  double expected_false_drops() const { return local_.expected_false_drops(); }

 private:
  friend struct WindowShardAccess;
  WindowShard(const WindowConfig& config, std::uint32_t index, std::uint32_t num_shards,
              WindowedFilter local);

  // `key_layout`: how the keys become hashes (config_.generation, or its identity-hash twin for
  // keys that are hashes already).
  template <typename Key>
  std::uint64_t dedup_keys(std::span<const Key> keys, std::span<const std::int64_t> clocks,
                           std::span<std::uint8_t> is_new, const Layout& key_layout);
  template <typename Key>
  void contains_keys(std::span<const Key> keys, std::span<std::uint8_t> out) const;

  WindowConfig config_;
  // The shard's blocks of every generation as a window of their own (the "local" layout of
  // src/shard/shard_math.hpp), fed each key's hash moved into its local block and the caller's
  // clock.
  WindowedFilter local_;
};

/// `window` cut into `num_shards` shards, each a copy of its blocks of every generation and of
/// the clock (on event time, shard 0 takes records_seen() and the others 0; shard 0 takes the
/// key counts, and every shard the whole window's as set_window_keys() gives them). Throws
/// std::invalid_argument for a shard count outside [1, num_blocks], and for a window whose
/// generations were resized unless shards_size_per_period(config, num_shards).
std::vector<WindowShard> split(const WindowedFilter& window, std::uint32_t num_shards,
                               const Options& options = {});

/// The whole window from all its shards, given in any order: byte for byte the window split()
/// cut. Throws std::invalid_argument unless `shards` are exactly shards 0..S-1 of one config and
/// S whose clock states and generation sizes agree; the message names the first field that
/// differs and its values.
WindowedFilter concat(std::span<const WindowShard> shards, const Options& options = {});

/// The same window cut into `num_shards` shards instead: a copy of bytes and clock, no key is
/// rehashed and no answer changes. `shards` as for concat(); resized generations need
/// shards_size_per_period(config, num_shards).
std::vector<WindowShard> reshard(std::span<const WindowShard> shards, std::uint32_t num_shards,
                                 const Options& options = {});

/// Writes `shard` to `path` atomically in the window file format (docs/FORMAT.md): the header
/// records the whole window's config, the clock, and the shard's place; each generation's payload
/// is the shard's blocks.
void save(const WindowShard& shard, const std::filesystem::path& path, const FileState& state = {});

/// Reads and fully verifies a window shard file. A whole window's file reads as shard 0 of 1.
/// Throws FormatError for a bad file, IoError when it cannot be read.
WindowShard load_window_shard(const std::filesystem::path& path, FileState* state = nullptr,
                              const Options& options = {});

/// Exactly the bytes save(shard, path, state) writes, in memory (for checkpoints of stream
/// processors and pickling).
std::vector<std::byte> to_file_bytes(const WindowShard& shard, const FileState& state = {});

/// load_window_shard() of file bytes held in memory; `source` names them in errors.
WindowShard load_window_shard(std::span<const std::byte> bytes, FileState* state = nullptr,
                              const Options& options = {},
                              const std::string& source = "window bytes");

}  // namespace bulkbloom
