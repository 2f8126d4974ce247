#include "cli/run_record.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/errors.hpp"
#include "persist/file_io.hpp"

namespace bulkbloom::cli {
namespace {

constexpr std::uint64_t kSampleBytes = std::uint64_t{64} << 10;
constexpr std::string_view kMagicV1 = "bulkbloom-run 1\n";
constexpr std::string_view kMagic = "bulkbloom-run 2\n";

// Options that change how a run goes, not what it writes.
bool neutral_flag(std::string_view arg) {
  return arg == "--resume" || arg == "--wait-lock" || arg == "--force";
}
bool neutral_option(std::string_view arg) {
  return arg == "--stats" || arg == "--threads" || arg == "--backend" || arg == "--checkpoint" ||
         arg == "--checkpoint-every";
}

// Options left out of run_command(): see there.
bool outside_command(std::string_view name) {
  const std::string option = "--" + std::string(name);
  if (neutral_flag(option) || neutral_option(option)) return true;
  for (const std::string_view other :
       {"buffer-size", "output", "dups", "refused", "filter", "capacity", "max-capacity", "fpr",
        "shape", "seed", "index", "num-blocks", "on-full"}) {
    if (name == other) return true;
  }
  return false;
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

// `path` made absolute, with its links resolved where it exists: how two names of one output
// are told to be the same.
std::string resolved(const std::string& path) {
  std::error_code error;
  const auto canonical = std::filesystem::weakly_canonical(std::filesystem::absolute(path), error);
  return error ? path : canonical.string();
}

// Why `run` is not `last`, or nothing if it is that run. The cheap comparisons come first; the
// inputs are hashed only when nothing else differs.
std::optional<std::string> why_not_the_same_run(const RunRecord& last, const PlannedRun& run) {
  if (last.legacy) {
    if (!run.fingerprint.empty() && run.fingerprint == last.command) return std::nullopt;
    return "the committed run was recorded by an older bulkbloom, without the content of its "
           "inputs";
  }
  if (run.command != last.command) {
    return "its options differ (now: '" + run.command + "'; committed: '" + last.command + "')";
  }
  if (last.inputs.empty()) return "the committed run read an input that cannot be read again";
  const std::vector<std::string> inputs =
      run.inputs.empty() ? std::vector<std::string>{"-"} : run.inputs;
  if (inputs.size() != last.inputs.size()) {
    return "it reads " + std::to_string(inputs.size()) + " inputs; the committed run read " +
           std::to_string(last.inputs.size());
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string& input = inputs[i];
    if (input == "-") return std::string("stdin cannot be compared with the committed run's input");
    struct stat st {};
    if (stat(input.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return input +
             " is not a regular file, and cannot be compared with the committed run's input";
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size != last.inputs[i].content.bytes) {
      return input + " has " + std::to_string(size) + " bytes; the committed run read " +
             std::to_string(last.inputs[i].content.bytes);
    }
  }
  std::vector<std::string> outputs;
  for (const std::string& out : run.outputs) {
    if (out != "-") outputs.push_back(resolved(out));
  }
  std::vector<std::string> committed;
  for (const OutputRecord& out : last.outputs) committed.push_back(resolved(out.path));
  if (outputs != committed) return std::string("it writes other outputs than the committed run");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto now = content_of(inputs[i]);
    if (!now || now->bytes != last.inputs[i].content.bytes ||
        now->hash != last.inputs[i].content.hash) {
      return inputs[i] + " holds other bytes than the committed run read";
    }
  }
  return std::nullopt;
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

std::optional<InputContent> content_of(const std::string& path) {
  struct stat st {};
  if (path == "-" || stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  const detail::File file(path, O_RDONLY);
  detail::DataChecksum checksum;
  std::vector<std::byte> buffer(std::size_t{8} << 20);
  InputContent content;
  for (;;) {
    const ssize_t got =
        pread(file.fd(), buffer.data(), buffer.size(), static_cast<off_t>(content.bytes));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw IoError(with_errno("cannot read " + path));
    if (got == 0) break;
    checksum.update(buffer.data(), static_cast<std::size_t>(got));
    content.bytes += static_cast<std::uint64_t>(got);
  }
  content.hash = checksum.digest();
  return content;
}

std::string run_command(const ArgParser& parser) {
  std::string text;
  for (const auto& [name, value] : parser.given()) {
    if (outside_command(name)) continue;
    text += (text.empty() ? "--" : " --") + name;
    if (!value.empty()) text += "=" + value;
  }
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
  return OutputRecord{resolved(path), size, sample_hash(file, size)};
}

std::vector<std::byte> encode_run_record(const RunRecord& record) {
  std::string text(kMagic);
  text += "command=" + record.command + "\n";
  for (const InputRecord& in : record.inputs) {
    text += "input=" + std::to_string(in.content.bytes) + " " + hex(in.content.hash) + " " +
            in.path + "\n";
  }
  for (const OutputRecord& out : record.outputs) {
    text +=
        "output=" + std::to_string(out.size) + " " + hex(out.sample_hash) + " " + out.path + "\n";
  }
  const auto lines = static_cast<std::size_t>(std::ranges::count(text, '\n'));
  if (lines != 2 + record.inputs.size() + record.outputs.size()) return {};
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

std::optional<RunRecord> decode_run_record(std::span<const std::byte> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  RunRecord record;
  record.legacy = text.starts_with(kMagicV1);
  if (!record.legacy && !text.starts_with(kMagic)) return std::nullopt;
  // "SIZE HASH PATH" after the key of an input or output line.
  const auto sized_path = [](const std::string& line, std::size_t from, std::uint64_t& size,
                             std::uint64_t& hash) {
    char* rest = nullptr;
    size = std::strtoull(line.c_str() + from, &rest, 10);
    hash = std::strtoull(rest, &rest, 16);
    return std::string(rest + (*rest == ' ' ? 1 : 0));
  };
  std::size_t pos = kMagic.size();
  while (pos < text.size()) {
    const std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) return std::nullopt;
    const std::string line(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.starts_with(record.legacy ? "run=" : "command=")) {
      record.command = line.substr(line.find('=') + 1);
    } else if (!record.legacy && line.starts_with("input=")) {
      InputRecord in;
      in.path = sized_path(line, 6, in.content.bytes, in.content.hash);
      record.inputs.push_back(in);
    } else if (line.starts_with("output=")) {
      OutputRecord out;
      out.path = sized_path(line, 7, out.size, out.sample_hash);
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

Rerun check_rerun(const RunRecord& last, const PlannedRun& run, const std::string& state_path,
                  bool force) {
  const std::optional<std::string> why_other = why_not_the_same_run(last, run);
  if (!why_other) {
    if (const auto why = outputs_differ(last)) {
      throw Error(state_path + " already holds this run (same command, same inputs), " +
                  "committed earlier, but " + *why + ": the outputs cannot be computed again " +
                  "from it; restore " + state_path + " as it was before that run");
    }
    return Rerun::committed;
  }
  if (force) return Rerun::new_run;
  for (const std::string& out : run.outputs) {
    if (out == "-") continue;
    const std::string target = resolved(out);
    for (const OutputRecord& committed : last.outputs) {
      if (resolved(committed.path) != target || committed.size == 0) continue;
      const auto now = record_output(out);
      if (!now || now->size != committed.size || now->sample_hash != committed.sample_hash) {
        continue;  // no longer what that run committed: nothing of it to lose
      }
      throw Error(
          out + " holds the output of the last run committed to " + state_path +
          ", and this run is not that run: " + *why_other + ". It would replace " + out +
          " with the records whose keys " + state_path +
          " does not hold yet; nothing was changed. If that run is the one meant, its "
          "result is already in " +
          out +
          "; to keep it, write this run's output elsewhere (-o, --dups or --refused another "
          "file); to replace it, pass --force");
    }
  }
  return Rerun::new_run;
}

}  // namespace bulkbloom::cli
