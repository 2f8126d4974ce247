// The filter a dedup carries from run to run (--filter, checkpoints): the library's GrownFilter
// (bulkbloom/grown_filter.hpp) with this tool's policy on top: --on-full, the errors that name
// the filter, and which --format keys hash alike.
#pragma once

#include <bulkbloom/grown_filter.hpp>
#include <bulkbloom/incremental.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/record_format.hpp"

namespace bulkbloom::cli {

/// What a run does when its keys would push the carried filter past its target rate.
enum class OnFull {
  grow,   ///< Add a generation sized for the new load.
  error,  ///< Stop with an error before the filter passes its target.
};

class CarriedFilter : public GrownFilter {
 public:
  using GrownFilter::GrownFilter;
  explicit CarriedFilter(GrownFilter filter) : GrownFilter(std::move(filter)) {}

  /// GrownFilter::load(), with an error for a window's file that says how this tool reads one;
  /// a state directory (docs/FORMAT.md "State directories") is read by the overload below.
  static CarriedFilter load(const std::filesystem::path& path, double default_fpr,
                            const Options& options, std::vector<std::byte>* caller_metadata);
  /// The grown filter `directory` holds, with the same error for a window's.
  static CarriedFilter load(StateDirectory& directory, const Options& options,
                            std::vector<std::byte>* caller_metadata);

  /// What to do when a batch would pass the target. `expected_keys` is the number of keys the
  /// run is expected to bring (0: unknown) and `keys_done` how many of them a resumed run had
  /// already passed: a new generation is sized for the rest of the load. `name` names the
  /// filter in errors; `refused_hint` ends the error of OnFull::error (what to do instead).
  void set_growth(OnFull on_full, std::uint64_t expected_keys, std::uint64_t keys_done,
                  const std::string& name, const std::string& refused_hint);

  /// GrownFilter::merge(), refused with an Error naming `other_name` when the key formats hash
  /// differently (integers and byte strings).
  void merge(const CarriedFilter& other, const std::string& other_name);

  /// Whether keys read with `format` hash as its own do: false for integers against byte strings;
  /// true when its key format is unknown.
  bool hashes_like(const RecordFormat& format) const;
};

}  // namespace bulkbloom::cli
