/// @file
/// A filter that grows instead of passing its false-positive rate (a scalable Bloom filter):
/// generations, oldest first, each sized for the load it was added for; a key is held when some
/// generation may hold it. It knows the capacity and the rate it was sized for, and its files
/// record them. The command-line tool carries one from run to run (`dedup --filter`, `build`);
/// the rule for the generations' rates and the file layout are in docs/FORMAT.md ("Carried
/// filters").
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bulkbloom/filter.hpp"
#include "bulkbloom/format.hpp"
#include "bulkbloom/layout.hpp"
#include "bulkbloom/part.hpp"

namespace bulkbloom {

namespace detail {
struct GrownAccess;
}  // namespace detail

/// What a filter file records about how its filter was sized (docs/FORMAT.md, "The sizing
/// record"): the text at the start of its metadata.
struct SizingRecord {
  double promised_fpr = 0.0;   ///< The rate the filter promises never to pass.
  std::string key_format;      ///< How its keys were read (a CLI --format name; empty: unknown).
  std::uint64_t capacity = 0;  ///< Keys its first generation is sized for.
};

/// The sizing record at the start of `metadata` (a filter file's), or nullopt when there is none
/// (a filter saved without one). Throws FormatError, naming `source`, for a malformed record.
std::optional<SizingRecord> read_sizing_record(std::span<const std::byte> metadata,
                                               const std::string& source);

/// The metadata of a one-generation filter sized as `record` says, its first generation at the
/// target GrownFilter::generation_target(record.promised_fpr, 0): the sizing record, then
/// `caller_metadata`. A filter saved with it reads back through GrownFilter::load() with its
/// promise.
std::vector<std::byte> sizing_record_bytes(const SizingRecord& record,
                                           std::span<const std::byte> caller_metadata = {});

/// A growing filter: generations oldest first, each with the capacity and rate it was sized for
/// and the count of keys it took. Move-only, like Filter.
class GrownFilter {
 public:
  /// Most generations a grown filter may have.
  static constexpr std::size_t kMaxGenerations = 64;
  /// The rate a filter file without a sizing record is taken as promising, unless load() is told.
  static constexpr double kDefaultFpr = 0.001;

  /// One generation: its filter, the keys and the rate it was sized for, the keys it took.
  struct Generation {
    Filter filter;
    std::uint64_t capacity;  ///< Keys it is sized for.
    double target;           ///< Its own rate limit.
    std::uint64_t keys;      ///< Keys it took (reported new).
  };

  /// Called before a generation is added for a batch: `new_keys` is how many of the batch's
  /// keys the newest generation would take as new, `at_limit` is true when the filter has
  /// kMaxGenerations already (it then throws std::length_error if the check returns). A check that
  /// throws refuses the growth, and the batch, with the filter unchanged.
  using GrowthCheck =
      std::function<void(const GrownFilter& filter, std::uint64_t new_keys, bool at_limit)>;

  /// The target rate of generation `index` of a filter promising `promise`: 3/4 of the promise
  /// for the first, a quarter of the one before for each later one, so that their sum (a bound
  /// on the compound rate) stays under the promise.
  static double generation_target(double promise, std::size_t index);

  /// The layout of a filter that promises `fpr` at `capacity` keys: Layout::for_capacity for
  /// `capacity` keys at generation_target(fpr, 0), so that it takes `capacity` keys before it
  /// grows. Every frontend sizes such a filter so (the CLI's build and dedup, Python's Filter).
  /// Throws std::invalid_argument for a capacity or rate out of range.
  static Layout first_layout(std::uint64_t capacity, double fpr);

  /// A new filter of one generation of first_layout(capacity, fpr). `key_format` names how its
  /// keys are read (stored, not interpreted).
  static GrownFilter for_capacity(std::uint64_t capacity, double fpr, std::string key_format = {},
                                  const Options& options = {});

  /// A new filter of one generation with `layout`, taken as sized for `capacity` keys at the
  /// promised rate `fpr` (its first generation's target is generation_target(fpr, 0)).
  GrownFilter(const Layout& layout, std::uint64_t capacity, double fpr, std::string key_format,
              const Options& options = {});

  /// Loads a filter file of format v1, with or without a sizing record, or a grown filter file.
  /// A filter without a sizing record (written by an older bulkbloom, or by save() of a plain
  /// Filter) is taken as promising `default_fpr`, with the capacity at which its model reaches
  /// that rate, and as holding the keys its bits show; so is a generation saved with a count of
  /// 0 (a caller that kept none). `caller_metadata` gets the bytes saved after the sizing
  /// record, if not null. Throws FormatError (a window's or shard's file
  /// included) / IoError.
  static GrownFilter load(const std::filesystem::path& path, const Options& options = {},
                          std::vector<std::byte>* caller_metadata = nullptr,
                          double default_fpr = kDefaultFpr);
  /// load() of the bytes to_file_bytes() made (or a file's contents).
  static GrownFilter load(std::span<const std::byte> bytes, const Options& options = {},
                          std::vector<std::byte>* caller_metadata = nullptr,
                          double default_fpr = kDefaultFpr);

  /// Saves atomically to `path`, with the sizing record and then `caller_metadata`: a filter
  /// file while there is one generation (so that Filter's load() and older bulkbloom versions
  /// read it), else a grown filter file. Throws IoError.
  void save(const std::filesystem::path& path,
            std::span<const std::byte> caller_metadata = {}) const;
  /// The bytes save() writes.
  std::vector<std::byte> to_file_bytes(std::span<const std::byte> caller_metadata = {}) const;

  /// Makes this filter the union of itself and `other` (a bitwise OR), both of one generation
  /// (std::logic_error otherwise) and one layout (std::invalid_argument otherwise). The union
  /// promises the lower of the two rates and counts the keys its bits estimate (at least each
  /// part's). Key formats are not compared: the caller knows which hash alike.
  void merge(const GrownFilter& other);

  /// Tells how many keys the caller expects to pass in all (0: unknown) and how many of them
  /// were passed before (a resumed run): a new generation is sized for at least the rest.
  void expect_keys(std::uint64_t expected_keys, std::uint64_t keys_done);
  /// Sets the check called before each growth (none: always grow, up to kMaxGenerations).
  void set_growth_check(GrowthCheck check);

  /// Dedups a batch in order, growing first if the batch's new keys would take the newest
  /// generation past its target (docs/FORMAT.md, "Growth"). is_new[i] = 1 if no generation may hold
  /// keys[i]. Returns the number of 1s.
  std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys,
                                 std::span<std::uint8_t> is_new);
  std::uint64_t insert_if_absent(std::span<const std::string_view> keys,
                                 std::span<std::uint8_t> is_new);
  /// out[i] = 1 if some generation may hold keys[i].
  void contains(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out) const;
  void contains(std::span<const std::string_view> keys, std::span<std::uint8_t> out) const;

  /// False-positive rate now, from the bits: 1 − Π(1 − current_fpr of each generation).
  double current_fpr() const;
  /// The rate the filter promises never to pass.
  double promised_fpr() const { return promise_; }
  /// The key format it was made for (empty if unknown).
  const std::string& key_format() const { return key_format_; }
  /// Capacity of the first generation.
  std::uint64_t capacity() const { return generations_.front().capacity; }
  /// The generations, oldest first; keys go into the newest.
  const std::vector<Generation>& generations() const { return generations_; }
  std::size_t generation_count() const { return generations_.size(); }
  /// Times this object grew (added a generation, or resized an empty one).
  std::size_t growths() const { return growths_; }
  /// Capacity of the newest generation.
  std::uint64_t newest_capacity() const { return generations_.back().capacity; }
  /// The newest generation's filter (the one keys go into).
  const Filter& newest() const { return generations_.back().filter; }
  /// Keys taken by all generations (saved counts).
  std::uint64_t keys() const;
  /// Never-seen keys this object is expected to have wrongly reported as held: for each batch,
  /// the older generations' rate from their bits and the newest's model at its fill.
  double expected_false_drops() const { return expected_false_drops_; }
  /// Starts expected_false_drops() at `value` (what a resumed run's first part expected).
  void set_expected_false_drops(double value) { expected_false_drops_ = value; }
  /// Whether the filter was past its promise when loaded (a filter of an older bulkbloom).
  bool loaded_past_promise() const { return loaded_past_promise_; }
  /// One line per generation for people: layout, capacity, target, keys.
  std::string describe_generations() const;

 private:
  friend struct detail::GrownAccess;
  GrownFilter(std::vector<Generation> generations, double promise, std::string key_format,
              const Options& options);
  template <typename Key>
  std::uint64_t dedup(std::span<const Key> keys, std::span<std::uint8_t> is_new);
  template <typename Key>
  void contains_all(std::span<const Key> keys, std::span<std::uint8_t> out) const;
  template <typename Key>
  void contains_older(std::span<const Key> keys, std::span<std::uint8_t> out) const;
  // insert_if_absent of `keys` into `newest` (this filter's newest generation's bits, or a copy
  // of them) of the keys no older generation holds; is_new[i] = 1 for those it took as new.
  template <typename Key>
  std::uint64_t insert_new(Filter& newest, std::span<const Key> keys,
                           std::span<std::uint8_t> is_new) const;
  void make_room(std::uint64_t batch_keys, const std::function<std::uint64_t()>& count_absent,
                 const std::function<std::uint64_t()>& count_new);
  void refresh_older_fpr();

  std::vector<Generation> generations_;
  double promise_;
  std::string key_format_;
  GrowthCheck growth_check_;
  std::uint64_t expected_keys_ = 0;
  std::uint64_t keys_seen_ = 0;  // keys passed to insert_if_absent by this object
  Options options_;
  std::size_t growths_ = 0;
  double older_fpr_ = 0.0;  // compound rate of the generations before the newest
  double expected_false_drops_ = 0.0;
  bool loaded_past_promise_ = false;
  // The change log of bulkbloom/incremental.hpp, kept only once enabled: the hashes new to the
  // newest generation since the log was last taken, whether that generation was started empty
  // since then, and whether its bits changed otherwise (a merge) so that the log cannot tell.
  std::vector<std::uint64_t> change_log_;
  bool logging_ = false;
  bool log_from_empty_ = false;
  bool log_rewritten_ = false;
  // The final logs of the generations sealed since the log was last taken (a larger one took
  // over), so that a caller holding such a generation as base + logs completes it without its
  // bits.
  std::vector<ClosedPart> closed_logs_;
};

}  // namespace bulkbloom
