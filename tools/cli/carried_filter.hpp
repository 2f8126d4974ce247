// The filter a dedup carries from run to run (--filter, checkpoints): it knows the capacity and
// the false-positive rate it was sized for and never passes that rate silently. When the keys of
// a run would push it past its target it grows as a scalable Bloom filter does: a new generation
// sized for the new load is added, and a key is new when no generation may hold it. The rule for
// the generations' rates and the file layout are in docs/FORMAT.md ("Carried filters").
#pragma once

#include <bulkbloom/filter.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/record_format.hpp"

namespace bulkbloom::cli {

/// What a run does when its keys would push the carried filter past its target rate.
enum class OnFull {
  grow,   ///< Add a generation sized for the new load.
  error,  ///< Stop with an error before the filter passes its target.
};

/// A growing filter: generations oldest first, each with the capacity and rate it was sized for
/// and the count of keys it took.
class CarriedFilter {
 public:
  /// Most generations a carried filter may have.
  static constexpr std::size_t kMaxGenerations = 64;

  /// A new filter of one generation with `layout`, sized for `capacity` keys at the promised
  /// rate `fpr`, for keys of `key_format` (a --format name).
  CarriedFilter(const Layout& layout, std::uint64_t capacity, double fpr, std::string key_format,
                const Options& options);

  /// Loads a carried filter file: a filter file of format v1, with or without this tool's sizing
  /// record, or a grown filter file. A filter without a sizing record (written by an older
  /// bulkbloom) is taken as promising `default_fpr`, with the capacity at which its model reaches
  /// that rate, and as holding the keys its bits show. `caller_metadata` gets the bytes saved
  /// with it by save() (a checkpoint's position), if not null. Throws FormatError / IoError.
  static CarriedFilter load(const std::filesystem::path& path, double default_fpr,
                            const Options& options, std::vector<std::byte>* caller_metadata);

  /// Saves atomically to `path`: a filter file while there is one generation (so that query,
  /// info and merge of older bulkbloom versions read it), else a grown filter file.
  void save(const std::filesystem::path& path, std::span<const std::byte> caller_metadata) const;

  /// Makes this filter the union of itself and `other` (a bitwise OR), both of one generation
  /// (std::logic_error otherwise) and one layout (std::invalid_argument otherwise). The union
  /// promises the lower of the two rates and counts the keys its bits estimate (at least each
  /// part's). Throws Error, naming `other_name`, when the key formats hash differently (integers
  /// and byte strings).
  void merge(const CarriedFilter& other, const std::string& other_name);

  /// What to do when a batch would pass the target. `expected_keys` is the number of keys the
  /// run is expected to bring (0: unknown) and `keys_done` how many of them a resumed run had
  /// already passed: a new generation is sized for the rest of the load. `name` names the
  /// filter in errors.
  void set_growth(OnFull on_full, std::uint64_t expected_keys, std::uint64_t keys_done,
                  std::string name);

  /// Dedups a batch in order, growing first if the batch could pass the target. is_new[i] = 1 if
  /// no generation may hold keys[i]. Returns the number of 1s. Throws Error under
  /// OnFull::error when the batch would pass the target.
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
  /// The key format it was made for (empty if unknown: a filter of an older bulkbloom).
  const std::string& key_format() const { return key_format_; }
  /// Whether keys read with `format` hash as its own do: false for integers against byte strings;
  /// true when its key format is unknown.
  bool hashes_like(const RecordFormat& format) const;
  /// Capacity of the first generation.
  std::uint64_t capacity() const { return generations_.front().capacity; }
  std::size_t generation_count() const { return generations_.size(); }
  /// Times this process grew the filter (added a generation, or resized an empty one).
  std::size_t growths() const { return growths_; }
  /// Capacity of the newest generation.
  std::uint64_t newest_capacity() const { return generations_.back().capacity; }
  /// The newest generation (the one keys go into).
  const Filter& newest() const { return generations_.back().filter; }
  /// Keys taken by all generations (saved counts).
  std::uint64_t keys() const;
  /// Never-seen keys this process is expected to have wrongly reported as held: for each batch,
  /// the older generations' rate from their bits and the newest's model at its fill.
  double expected_false_drops() const { return expected_false_drops_; }
  /// Starts expected_false_drops() at `value` (what a resumed run's first part expected).
  void set_expected_false_drops(double value) { expected_false_drops_ = value; }
  /// Whether the filter was past its promise when loaded (a filter of an older bulkbloom).
  bool loaded_past_promise() const { return loaded_past_promise_; }
  /// One line per generation for people: layout, capacity, target, keys.
  std::string describe_generations() const;

 private:
  struct Generation {
    Filter filter;
    std::uint64_t capacity;
    double target;       // this generation's own rate limit
    std::uint64_t keys;  // keys it took (reported new)
  };
  CarriedFilter(std::vector<Generation> generations, double promise, std::string key_format,
                const Options& options);
  template <typename Key>
  std::uint64_t dedup(std::span<const Key> keys, std::span<std::uint8_t> is_new);
  template <typename Key>
  void contains_all(std::span<const Key> keys, std::span<std::uint8_t> out) const;
  template <typename Key>
  void contains_older(std::span<const Key> keys, std::span<std::uint8_t> out) const;
  void make_room(std::uint64_t batch_keys, const std::function<std::uint64_t()>& count_absent);
  void refresh_older_fpr();

  std::vector<Generation> generations_;
  double promise_;
  std::string key_format_;
  OnFull on_full_ = OnFull::grow;
  std::uint64_t expected_keys_ = 0;
  std::uint64_t keys_seen_ = 0;  // keys passed to insert_if_absent by this process
  std::string name_;
  Options options_;
  std::size_t growths_ = 0;
  double older_fpr_ = 0.0;  // compound rate of the generations before the newest
  double expected_false_drops_ = 0.0;
  bool loaded_past_promise_ = false;
};

/// What a carried filter file of one generation records about itself (docs/FORMAT.md, "The
/// sizing record"), read from its metadata; nullopt for a filter without one (an older bulkbloom,
/// or the library's save()). Throws FormatError, naming `source`, for a malformed record.
struct SizingRecord {
  double promised_fpr;
  std::string key_format;
  std::uint64_t capacity;  ///< Of the first generation.
};
std::optional<SizingRecord> read_sizing_record(std::span<const std::byte> metadata,
                                               const std::string& source);

/// True if the file at `path` is a grown filter file (several generations).
bool is_grown_filter_file(const std::filesystem::path& path);
/// True if the file at `path` is a window file (docs/FORMAT.md, "Window files").
bool is_window_file(const std::filesystem::path& path);

/// The target rate of generation `index` of a filter promising `promise`: 3/4 of the promise
/// for the first, a quarter of the one before for each later one, so that their sum (a bound on
/// the compound rate) stays under the promise.
double generation_target(double promise, std::size_t index);

}  // namespace bulkbloom::cli
