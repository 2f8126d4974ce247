#include "cli/window_options.hpp"

#include <algorithm>
#include <cmath>

#include "cli/event_time.hpp"

namespace bulkbloom::cli {
namespace {

std::uint64_t period_of(const WindowRequest& request) {
  WindowConfig config;
  config.clock = request.clock;
  config.window = request.length;
  config.generations = request.generations;
  config.lateness = request.lateness;
  return config.period();
}

// The keys an event-time generation is sized for at least: --capacity N (records within one
// window length) spread over the window, as a steady stream brings them; else the input's record
// count, all of it, since a dump may lie within one period; at most --max-capacity. 0 when
// nothing tells (a pipe without --capacity).
std::uint64_t generation_keys(const WindowRequest& request, const SizingRequest& sizing,
                              const ChunkReader& reader, const RecordFormat& format) {
  std::uint64_t keys = 0;
  if (sizing.capacity) {
    keys = static_cast<std::uint64_t>(
        std::ceil(static_cast<double>(*sizing.capacity) / static_cast<double>(request.length) *
                  static_cast<double>(period_of(request))));
  } else if (reader.total_known()) {
    keys = std::max<std::uint64_t>(estimated_records(reader, format), 1);
  }
  return request.max_capacity ? std::min(keys, *request.max_capacity) : keys;
}

std::uint64_t duration_option(const ArgParser& parser, std::string_view name) {
  const std::string text = parser.get_or(name, "");
  const auto seconds = parse_duration(text);
  if (!seconds) {
    throw UsageError("--" + std::string(name) + ": '" + text +
                     "' is not a duration: expected a positive number with s, m, h or d, e.g. 36h");
  }
  return *seconds;
}

}  // namespace

void add_window_options(ArgParser& parser) {
  parser
      .value("window", "DURATION",
             "sliding window over event time: drop a record whose key arrived within the last "
             "DURATION (36h, 90m, 3600s, 2d); needs --time-field")
      .value("time-field", "N", "event-time column of csv/tsv records: seconds or ISO-8601")
      .value("window-records", "N",
             "sliding window over record counts: drop a record whose key came within the last N "
             "records")
      .value("generations", "G",
             "generations of a window (default 4): a key is forgotten once the clock is "
             "G x ceil((window + lateness) / (G-1)) past its last arrival")
      .value("lateness", "DURATION",
             "how far an event time may trail the latest one seen while repeats within the "
             "window are still dropped (default 0)")
      .value("max-future", "DURATION",
             "an event time later than now plus this is bad input, as it would pin the "
             "window's clock (default 1d)")
      .value("max-capacity", "N",
             "the most keys a window generation is sized for, whatever the periods before it "
             "brought (default: no bound)");
}

std::optional<WindowRequest> window_request(const ArgParser& parser, const RecordFormat& format) {
  const bool by_time = parser.has("window"), by_records = parser.has("window-records");
  if (!by_time && !by_records) {
    for (const char* name :
         {"time-field", "generations", "lateness", "max-future", "max-capacity"}) {
      if (parser.has(name)) {
        throw UsageError(std::string("--") + name + " needs --window or --window-records");
      }
    }
    return std::nullopt;
  }
  if (by_time && by_records) throw UsageError("--window and --window-records exclude each other");
  if (parser.has("shape") || parser.has("num-blocks")) {
    throw UsageError(std::string(parser.has("shape") ? "--shape" : "--num-blocks") +
                     " does not apply to a window: each generation takes the smallest shape "
                     "and the blocks its sizing needs");
  }
  if (parser.has("index")) {
    throw UsageError(
        "--index does not apply to a window: each generation takes the block index its sizing "
        "chooses (full64 where high32 would cost more than 0.5 % of the false-positive rate)");
  }
  WindowRequest request;
  const std::uint64_t generations = parser.get_count("generations").value_or(4);
  if (generations < 2 || generations > WindowConfig::kMaxGenerations) {
    throw UsageError("--generations: " + std::to_string(generations) + " is outside [2, " +
                     std::to_string(WindowConfig::kMaxGenerations) + "]");
  }
  request.generations = static_cast<std::uint32_t>(generations);
  if (by_records) {
    if (parser.has("time-field") || parser.has("lateness") || parser.has("max-future") ||
        parser.has("max-capacity")) {
      throw UsageError(
          "--time-field, --lateness, --max-future and --max-capacity belong to --window, not "
          "--window-records (whose generations hold one period's records each)");
    }
    request.length = *parser.get_count("window-records");
    if (request.length == 0) throw UsageError("--window-records must be at least 1");
    return request;
  }
  request.clock = WindowClock::event_time;
  request.length = duration_option(parser, "window");
  if (request.length == 0) throw UsageError("--window must be longer than 0");
  if (parser.has("lateness")) request.lateness = duration_option(parser, "lateness");
  if (parser.has("max-future")) request.max_future = duration_option(parser, "max-future");
  if (parser.has("max-capacity")) {
    request.max_capacity = parser.get_count("max-capacity");
    if (*request.max_capacity == 0) throw UsageError("--max-capacity must be at least 1");
  }
  const auto column = parser.get_count("time-field");
  if (!column) throw UsageError("--window needs --time-field N, the event-time column");
  if (*column == 0 || *column > 1'000'000) {
    throw UsageError("--time-field: column " + std::to_string(*column) +
                     " is outside [1, 1000000]");
  }
  if (format.kind != FormatKind::csv && format.kind != FormatKind::tsv) {
    throw UsageError("--time-field needs a csv:N or tsv:N format, not " + format.name());
  }
  request.time_column = static_cast<unsigned>(*column);
  return request;
}

WindowConfig window_config(const WindowRequest& request, const SizingRequest& sizing,
                           const ChunkReader& reader, const RecordFormat& format,
                           std::string& capacity_note) {
  try {
    WindowConfig config;
    if (request.clock == WindowClock::records) {
      config = WindowConfig::for_records(request.length, sizing.fpr, request.generations);
      capacity_note = "the window's record count";
    } else {
      if (!sizing.capacity && !reader.total_known()) {
        throw UsageError(
            "the input is not a regular file, so its size cannot size the window: give "
            "--capacity N (the records expected within one window length)");
      }
      const std::uint64_t keys = generation_keys(request, sizing, reader, format);
      config = WindowConfig::for_event_time(
          static_cast<double>(keys) / static_cast<double>(period_of(request)), request.length,
          sizing.fpr, request.generations, request.lateness);
      capacity_note = sizing.capacity ? "given, records within one window length"
                                      : "the input's record count, for each generation";
    }
    config.generation.seed = sizing.seed;
    return config;
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

WindowSizing window_sizing(const WindowRequest& request, const SizingRequest& sizing,
                           const ChunkReader& reader, const RecordFormat& format) {
  if (request.clock == WindowClock::records) return {};
  return {generation_keys(request, sizing, reader, format), request.max_capacity.value_or(0)};
}

void check_window_matches(const WindowConfig& loaded, const WindowRequest& request,
                          const std::string& source) {
  if (loaded.clock != request.clock || loaded.window != request.length ||
      loaded.generations != request.generations || loaded.lateness != request.lateness) {
    throw UsageError(source + " holds another window (" + loaded.describe() +
                     "); give the same window options or another file");
  }
}

}  // namespace bulkbloom::cli
