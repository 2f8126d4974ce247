#include "cli/dedup_state.hpp"

#include <cstdio>

#include "cli/errors.hpp"
#include "persist/file_io.hpp"

namespace bulkbloom::cli {
namespace {

constexpr const char* kFilterCheckpointFile = "checkpoint.bbf";
constexpr const char* kWindowCheckpointFile = "window.bbw";

class FilterState final : public DedupState {
 public:
  explicit FilterState(CarriedFilter filter) : filter_(std::move(filter)) {}

  void start_run(const RunPlan& plan) override {
    if (filter_.loaded_past_promise()) {
      const std::string problem =
          plan.name + " was already past its false-positive rate when loaded: its bits give " +
          std::to_string(filter_.current_fpr()) + " (promised " +
          std::to_string(filter_.promised_fpr()) + ")";
      if (plan.on_full == OnFull::error) throw Error(problem);
      std::fprintf(stderr,
                   "bulkbloom dedup: warning: %s; new keys are wrongly dropped at that rate "
                   "whatever it grows (rebuild it from the data it was made from)\n",
                   problem.c_str());
    }
    filter_.set_growth(plan.on_full, plan.expected_records, plan.records_done, plan.name);
    filter_.set_expected_false_drops(plan.expected_false_drops);
  }

  std::uint64_t dedup(const ParsedRecords& parsed, std::span<const std::uint64_t> int_keys,
                      std::span<std::uint8_t> flags) override {
    if (parsed.byte_keys.empty()) return filter_.insert_if_absent(int_keys, flags);
    return filter_.insert_if_absent(std::span<const std::string_view>(parsed.byte_keys), flags);
  }

  void save(const std::filesystem::path& path, std::span<const std::byte> metadata,
            std::uint64_t) const override {
    filter_.save(path, metadata);
  }

  void save_checkpoint(const std::filesystem::path& dir, std::span<const std::byte> metadata,
                       std::uint64_t) const override {
    detail::save_checkpoint_file(
        dir, kFilterCheckpointFile,
        [&](const std::filesystem::path& path) { filter_.save(path, metadata); });
  }

  double expected_false_drops(std::uint64_t) const override {
    return filter_.expected_false_drops();
  }

  void describe(Summary& summary, std::uint64_t kept) const override {
    const double drops = expected_false_drops(kept);
    char line[160];
    std::snprintf(line, sizeof line, "%.1f (the filter's false-positive rate over the run)", drops);
    summary.number("expected_wrongly_dropped", "expected unique wrongly dropped", drops, line);
    const double fpr = filter_.current_fpr();
    std::snprintf(line, sizeof line, "%.3g from the bits (promised %.3g)", fpr,
                  filter_.promised_fpr());
    summary.number("final_fpr", "false-positive rate now", fpr, line);
    summary.number("promised_fpr", "", filter_.promised_fpr());
    summary.number("generations", "", static_cast<double>(filter_.generation_count()));
    summary.number("growths", "", static_cast<double>(filter_.growths()));
    if (filter_.growths() > 0) {
      summary.text(
          "", "filter grew",
          std::to_string(filter_.growths()) + " time(s) in this run to stay under its rate: " +
              std::to_string(filter_.generation_count()) + " generation(s), the newest sized for " +
              std::to_string(filter_.newest_capacity()) + " keys");
    }
  }

  const Filter& shown_filter() const override { return filter_.newest(); }

 private:
  CarriedFilter filter_;
};

class WindowState final : public DedupState {
 public:
  explicit WindowState(WindowedFilter window) : window_(std::move(window)) {}

  void start_run(const RunPlan&) override {}  // a window forgets: it cannot fill up

  std::uint64_t dedup(const ParsedRecords& parsed, std::span<const std::uint64_t> int_keys,
                      std::span<std::uint8_t> flags) override {
    const std::span<const std::string_view> byte_keys(parsed.byte_keys);
    if (window_.config().clock == WindowClock::records) {
      return byte_keys.empty() ? window_.insert_if_absent(int_keys, flags)
                               : window_.insert_if_absent(byte_keys, flags);
    }
    const std::span<const std::int64_t> times(parsed.times);
    return byte_keys.empty() ? window_.insert_if_absent(int_keys, times, flags)
                             : window_.insert_if_absent(byte_keys, times, flags);
  }

  void save(const std::filesystem::path& path, std::span<const std::byte> metadata,
            std::uint64_t keys) const override {
    bulkbloom::save(window_, path, {keys, {metadata.begin(), metadata.end()}});
  }

  void save_checkpoint(const std::filesystem::path& dir, std::span<const std::byte> metadata,
                       std::uint64_t keys) const override {
    bulkbloom::save_checkpoint(dir, window_, {keys, {metadata.begin(), metadata.end()}});
  }

  // A window's false-positive rate stays near its current one (it cycles with the rotations).
  double expected_false_drops(std::uint64_t kept) const override {
    return window_.current_fpr() * static_cast<double>(kept);
  }

  void describe(Summary& summary, std::uint64_t kept) const override {
    const double drops = expected_false_drops(kept);
    char line[160];
    std::snprintf(line, sizeof line, "%.1f (the window's false-positive rate now)", drops);
    summary.number("expected_wrongly_dropped", "expected unique wrongly dropped", drops, line);
    summary.text("window", "window", window_.config().describe());
  }

  const Filter& shown_filter() const override { return window_.generation(0); }

 private:
  WindowedFilter window_;
};

}  // namespace

std::unique_ptr<DedupState> filter_state(CarriedFilter filter) {
  return std::make_unique<FilterState>(std::move(filter));
}

std::unique_ptr<DedupState> window_state(WindowedFilter window) {
  return std::make_unique<WindowState>(std::move(window));
}

std::unique_ptr<DedupState> load_checkpoint_state(const std::filesystem::path& dir, bool window,
                                                  double default_fpr, const Options& options,
                                                  std::vector<std::byte>& metadata) {
  if (window) {
    auto saved = load_window_checkpoint(dir, options);
    if (!saved) return nullptr;
    metadata = std::move(saved->metadata);
    return window_state(std::move(saved->window));
  }
  const auto file = detail::find_checkpoint_file(dir, kFilterCheckpointFile);
  if (!file) return nullptr;
  return filter_state(CarriedFilter::load(*file, default_fpr, options, &metadata));
}

}  // namespace bulkbloom::cli
