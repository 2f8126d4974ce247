#include "cli/dedup_checkpoint.hpp"

#include <bulkbloom/format.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace bulkbloom::cli {
namespace {

constexpr std::string_view kMagic = "bulkbloom-dedup-checkpoint 1";

}  // namespace

bool holds_checkpoint(std::span<const std::byte> manifest) {
  const std::string_view text(reinterpret_cast<const char*>(manifest.data()), manifest.size());
  return text.find(std::string(kMagic) + "\n") != std::string_view::npos;
}

std::vector<std::byte> encode_checkpoint(const DedupCheckpoint& c) {
  const auto line = [](std::string_view key, std::uint64_t value) {
    return std::string(key) + "=" + std::to_string(value) + "\n";
  };
  std::string text = std::string(kMagic) + "\n";
  text += "run=" + c.run_identity + "\n";
  text += line("input", c.state.position.input);
  text += line("offset", c.state.position.offset);
  text += line("next_line", c.state.next_line);
  text += line("records", c.state.counters.records);
  text += line("flagged", c.state.counters.flagged);
  text += line("skipped_bad", c.state.counters.skipped_bad);
  text += line("bytes", c.state.counters.bytes);
  text += line("output_bytes", c.output_bytes);
  text += line("dups_bytes", c.dups_bytes);
  text += line("keys_before", c.keys_before);
  text += line("complete", c.complete ? 1 : 0);
  char drops[40];
  std::snprintf(drops, sizeof drops, "%.17g", c.expected_false_drops);
  text += "expected_false_drops=" + std::string(drops) + "\n";
  if (c.filter_before) text += "filter_before=" + *c.filter_before + "\n";
  if (c.filter_run) {
    // Each of its lines as a line of its own (a run record is lines too); one empty line for
    // none, which tells a checkpoint that knows the state had no record from an older one.
    const std::string_view run(reinterpret_cast<const char*>(c.filter_run->data()),
                               c.filter_run->size());
    std::size_t pos = 0;
    do {
      const std::size_t end = std::min(run.find('\n', pos), run.size());
      text += "filter_run=" + std::string(run.substr(pos, end - pos)) + "\n";
      pos = end + 1;
    } while (pos < run.size());
  }
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

DedupCheckpoint decode_checkpoint(std::span<const std::byte> bytes, const std::string& where) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const auto bad = [&](const std::string& why) {
    return FormatError(where + " is not a dedup checkpoint: " + why);
  };
  if (!text.starts_with(std::string(kMagic) + "\n")) throw bad("wrong header");
  std::map<std::string, std::string, std::less<>> fields;
  std::optional<std::string> filter_run;
  std::size_t pos = kMagic.size() + 1;
  while (pos < text.size()) {
    const std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) throw bad("unterminated line");
    const std::string_view line = text.substr(pos, end - pos);
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) throw bad("line without '='");
    if (line.substr(0, eq) == "filter_run") {
      if (!filter_run) filter_run.emplace();
      if (eq + 1 < line.size()) *filter_run += std::string(line.substr(eq + 1)) + "\n";
    } else {
      fields.emplace(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
    }
    pos = end + 1;
  }
  const auto number = [&](std::string_view key) {
    const auto it = fields.find(key);
    if (it == fields.end()) throw bad("no " + std::string(key));
    std::uint64_t value = 0;
    const auto [end, ec] =
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), value);
    if (ec != std::errc() || end != it->second.data() + it->second.size()) {
      throw bad(std::string(key) + " is not a number");
    }
    return value;
  };
  DedupCheckpoint c;
  const auto run = fields.find("run");
  if (run == fields.end()) throw bad("no run");
  c.run_identity = run->second;
  c.state.position.input = number("input");
  c.state.position.offset = number("offset");
  c.state.next_line = number("next_line");
  c.state.counters.records = number("records");
  c.state.counters.flagged = number("flagged");
  c.state.counters.skipped_bad = number("skipped_bad");
  c.state.counters.bytes = number("bytes");
  c.output_bytes = number("output_bytes");
  c.dups_bytes = number("dups_bytes");
  c.keys_before = number("keys_before");
  c.complete = number("complete") != 0;
  if (const auto drops = fields.find("expected_false_drops"); drops != fields.end()) {
    c.expected_false_drops = std::strtod(drops->second.c_str(), nullptr);
  }
  if (const auto before = fields.find("filter_before"); before != fields.end()) {
    c.filter_before = before->second;
  }
  if (filter_run) {
    const auto* record = reinterpret_cast<const std::byte*>(filter_run->data());
    c.filter_run.emplace(record, record + filter_run->size());
  }
  return c;
}

}  // namespace bulkbloom::cli
