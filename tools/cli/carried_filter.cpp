#include "cli/carried_filter.hpp"

#include <cstdio>

#include "cli/errors.hpp"

namespace bulkbloom::cli {

namespace {

FormatError window_not_filter(const std::string& what) {
  return FormatError(what +
                     ", not a filter: dedup reads it with --window and the options it was made "
                     "with, info describes it");
}

}  // namespace

CarriedFilter CarriedFilter::load(const std::filesystem::path& path, double default_fpr,
                                  const Options& options, std::vector<std::byte>* caller_metadata) {
  if (std::filesystem::is_directory(path)) {
    StateDirectory directory(path);
    return load(directory, options, caller_metadata);
  }
  if (file_kind(path) == FileKind::window) {
    throw window_not_filter(path.string() + " is a sliding window's file");
  }
  return CarriedFilter(GrownFilter::load(path, options, caller_metadata, default_fpr));
}

CarriedFilter CarriedFilter::load(StateDirectory& directory, const Options& options,
                                  std::vector<std::byte>* caller_metadata) {
  if (directory.stored_kind() != StateDirectory::Kind::grown) {
    throw window_not_filter(directory.path().string() + " is a sliding window's state directory");
  }
  return CarriedFilter(directory.load_grown(caller_metadata, options));
}

void CarriedFilter::set_growth(OnFull on_full, std::uint64_t expected_keys, std::uint64_t keys_done,
                               const std::string& name, const std::string& refused_hint) {
  expect_keys(expected_keys, keys_done);
  set_growth_check([on_full, name, refused_hint](const GrownFilter& filter, std::uint64_t new_keys,
                                                 bool at_limit) {
    char promise[40];
    std::snprintf(promise, sizeof promise, "%.17g", filter.promised_fpr());
    const std::string sized = "sized for " + std::to_string(filter.capacity()) +
                              " keys at a false-positive rate of " + promise;
    if (on_full == OnFull::error) {
      throw Error(name + " is full: it holds " + std::to_string(filter.keys()) + " keys (" + sized +
                  "), and the next batch's " + std::to_string(new_keys) +
                  " new keys would pass that rate; " + refused_hint);
    }
    if (at_limit) {
      throw Error(name + " has grown to " + std::to_string(kMaxGenerations) +
                  " generations, the most it may have; start a new filter " + sized);
    }
  });
}

void CarriedFilter::merge(const CarriedFilter& other, const std::string& other_name) {
  if (!other.key_format().empty() && !hashes_like(RecordFormat::parse(other.key_format()))) {
    throw Error(other_name + " holds " + other.key_format() +
                " keys, which hash differently from the " + key_format() +
                " keys of the filters before it: the union would not find the repeats of either "
                "kind of key read as the other");
  }
  GrownFilter::merge(other);
}

bool CarriedFilter::hashes_like(const RecordFormat& format) const {
  return key_format().empty() ||
         RecordFormat::parse(key_format()).integer_keys() == format.integer_keys();
}

}  // namespace bulkbloom::cli
