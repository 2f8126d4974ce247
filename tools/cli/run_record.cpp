#include "cli/run_record.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>

#include "persist/file_io.hpp"

namespace bulkbloom::cli {
namespace {

constexpr std::uint64_t kSampleBytes = std::uint64_t{64} << 10;
constexpr std::string_view kMagic = "bulkbloom-run 1\n";

// Options that change how a run goes, not what it writes.
bool neutral_flag(std::string_view arg) {
  return arg == "--resume" || arg == "--wait-lock";
}
bool neutral_option(std::string_view arg) {
  return arg == "--stats" || arg == "--threads" || arg == "--backend" || arg == "--checkpoint" ||
         arg == "--checkpoint-every";
}

// XXH3 of the first and the last 64 KiB of an open file of `size` bytes.
std::uint64_t sample_hash(const detail::File& file, std::uint64_t size) {
  detail::DataChecksum checksum;
  std::vector<std::byte> buffer(std::min(size, kSampleBytes));
  file.read_exactly(buffer.data(), buffer.size(), 0);
  checksum.update(buffer);
  if (size > kSampleBytes) {
    buffer.resize(std::min(size - kSampleBytes, kSampleBytes));
    file.read_exactly(buffer.data(), buffer.size(), size - buffer.size());
    checksum.update(buffer);
  }
  return checksum.digest();
}

std::string hex(std::uint64_t value) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

std::string run_fingerprint(const std::vector<std::string_view>& args,
                            const std::vector<std::string>& inputs) {
  std::string text = "args:";
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (neutral_flag(arg)) continue;
    if (neutral_option(arg)) {
      ++i;
      continue;
    }
    const auto eq = arg.find('=');
    if (eq != std::string_view::npos && neutral_option(arg.substr(0, eq))) continue;
    text += ' ';
    text += arg;
  }
  text += "; inputs:";
  for (const std::string& input : inputs) {
    if (input == "-") return {};
    struct stat st {};
    if (stat(input.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
    const detail::File file(input, O_RDONLY);
    const auto size = static_cast<std::uint64_t>(st.st_size);
    text += " " + input + " size " + std::to_string(size) + " mtime " +
            std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) +
            " inode " + std::to_string(st.st_ino) + " sample " + hex(sample_hash(file, size));
  }
  if (inputs.empty()) return {};
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return text;
}

std::optional<OutputRecord> record_output(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  const detail::File file(path, O_RDONLY);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  return OutputRecord{path, size, sample_hash(file, size)};
}

std::vector<std::byte> encode_run_record(const RunRecord& record) {
  std::string text(kMagic);
  text += "run=" + record.fingerprint + "\n";
  for (const OutputRecord& out : record.outputs) {
    text +=
        "output=" + std::to_string(out.size) + " " + hex(out.sample_hash) + " " + out.path + "\n";
  }
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

std::optional<RunRecord> decode_run_record(std::span<const std::byte> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (!text.starts_with(kMagic)) return std::nullopt;
  RunRecord record;
  std::size_t pos = kMagic.size();
  while (pos < text.size()) {
    const std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) return std::nullopt;
    const std::string line(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.starts_with("run=")) {
      record.fingerprint = line.substr(4);
    } else if (line.starts_with("output=")) {
      char* rest = nullptr;
      OutputRecord out;
      out.size = std::strtoull(line.c_str() + 7, &rest, 10);
      out.sample_hash = std::strtoull(rest, &rest, 16);
      out.path = std::string(rest + (*rest == ' ' ? 1 : 0));
      record.outputs.push_back(out);
    } else {
      return std::nullopt;
    }
  }
  return record;
}

std::optional<std::string> outputs_differ(const RunRecord& record) {
  for (const OutputRecord& expected : record.outputs) {
    const auto now = record_output(expected.path);
    if (!now) return expected.path + " is missing";
    if (now->size != expected.size) {
      return expected.path + " has " + std::to_string(now->size) + " bytes, not the " +
             std::to_string(expected.size) + " committed";
    }
    if (now->sample_hash != expected.sample_hash) {
      return expected.path + " is not the file committed (its contents differ)";
    }
  }
  return std::nullopt;
}

}  // namespace bulkbloom::cli
