#include "cli/run_record.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
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
constexpr std::string_view kMagicV2 = "bulkbloom-run 2\n";
constexpr std::string_view kMagic = "bulkbloom-run 3\n";

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

// The files `run` writes (not stdout), by resolved path.
std::vector<std::string> resolved_outputs(const PlannedRun& run) {
  std::vector<std::string> outputs;
  for (const std::string& out : run.outputs) {
    if (out != "-") outputs.push_back(resolved(out));
  }
  return outputs;
}

std::vector<std::string> resolved_paths(std::span<const OutputRecord> outputs) {
  std::vector<std::string> paths;
  for (const OutputRecord& out : outputs) paths.push_back(resolved(out.path));
  return paths;
}

// What `run`'s inputs hold now: their total size (from stat) and, read once for the whole
// check, each one's bytes and hash, which both the last run and the recalled ones compare.
class PlannedInputs {
 public:
  explicit PlannedInputs(const PlannedRun& run)
      : names_(run.inputs.empty() ? std::vector<std::string>{"-"} : run.inputs) {}

  /// As given; "-" for stdin.
  const std::vector<std::string>& names() const { return names_; }

  /// All their bytes; nothing when one is not a regular file.
  std::optional<std::uint64_t> bytes() const {
    std::uint64_t total = 0;
    for (const std::string& input : names_) {
      struct stat st {};
      if (input == "-" || stat(input.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return std::nullopt;
      }
      total += static_cast<std::uint64_t>(st.st_size);
    }
    return total;
  }

  /// Each input's content (every byte read, the first time only); nothing when one is not a
  /// regular file.
  const std::optional<std::vector<InputContent>>& contents() {
    if (!read_) {
      read_ = true;
      std::vector<InputContent> all;
      for (const std::string& input : names_) {
        const auto content = content_of(input);
        if (!content) return contents_;
        all.push_back(*content);
      }
      contents_ = std::move(all);
    }
    return contents_;
  }

  /// inputs_hash() of contents().
  std::optional<std::uint64_t> hash() {
    if (!contents()) return std::nullopt;
    return inputs_hash(*contents());
  }

 private:
  std::vector<std::string> names_;
  bool read_ = false;
  std::optional<std::vector<InputContent>> contents_;
};

// A committed run recorded without inputs cannot be told from another.
constexpr std::string_view kNotComparable =
    "the committed run read stdin or wrote to something other than a regular file, and cannot be "
    "compared";

// Why `run` is not `earlier`, or nothing if it is that run.
std::optional<std::string> why_not_the_earlier_run(const EarlierRun& earlier, const PlannedRun& run,
                                                   PlannedInputs& inputs) {
  if (run.command != earlier.command) {
    return "its options differ (now: '" + run.command + "'; committed: '" + earlier.command + "')";
  }
  if (!earlier.inputs_hash) return std::string(kNotComparable);
  if (resolved_outputs(run) != resolved_paths(earlier.outputs)) {
    return std::string("it writes other outputs than the committed run");
  }
  if (inputs.bytes() != earlier.input_bytes || inputs.hash() != earlier.inputs_hash) {
    return std::string("its inputs hold other bytes than the committed run read");
  }
  return std::nullopt;
}

// Why `run` is not `last`, or nothing if it is that run. The cheap comparisons come first; the
// inputs are hashed only when nothing else differs.
std::optional<std::string> why_not_the_same_run(const RunRecord& last, const PlannedRun& run,
                                                PlannedInputs& planned) {
  if (last.legacy) {
    if (!run.fingerprint.empty() && run.fingerprint == last.command) return std::nullopt;
    return "the committed run was recorded by an older bulkbloom, without the content of its "
           "inputs";
  }
  if (run.command != last.command) {
    return "its options differ (now: '" + run.command + "'; committed: '" + last.command + "')";
  }
  if (last.inputs.empty()) return std::string(kNotComparable);
  const std::vector<std::string>& inputs = planned.names();
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
  if (resolved_outputs(run) != resolved_paths(last.outputs)) {
    return std::string("it writes other outputs than the committed run");
  }
  const auto& now = planned.contents();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!now || (*now)[i].bytes != last.inputs[i].content.bytes ||
        (*now)[i].hash != last.inputs[i].content.hash) {
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

std::uint64_t inputs_hash(std::span<const InputContent> inputs) {
  detail::DataChecksum checksum;
  for (const InputContent& input : inputs) {
    std::array<std::byte, 16> pair{};
    for (int i = 0; i < 8; ++i) {
      pair[i] = static_cast<std::byte>(input.bytes >> (8 * i));
      pair[8 + i] = static_cast<std::byte>(input.hash >> (8 * i));
    }
    checksum.update(pair);
  }
  return checksum.digest();
}

std::vector<EarlierRun> runs_before(const std::optional<RunRecord>& last) {
  // A version 1 record holds a fingerprint of file names and times, not of contents.
  if (!last || last->legacy) return {};
  std::vector<EarlierRun> runs;
  EarlierRun previous{last->command, std::nullopt, 0, last->outputs};
  if (!last->inputs.empty()) {
    std::vector<InputContent> contents;
    for (const InputRecord& input : last->inputs) {
      contents.push_back(input.content);
      previous.input_bytes += input.content.bytes;
    }
    previous.inputs_hash = inputs_hash(contents);
  }
  runs.push_back(std::move(previous));
  for (const EarlierRun& earlier : last->earlier) {
    if (runs.size() == kRunsRecalled - 1) break;
    runs.push_back(earlier);
  }
  return runs;
}

std::vector<std::byte> encode_run_record(const RunRecord& record) {
  std::string text(kMagic);
  const auto put_outputs = [&](std::span<const OutputRecord> outputs) {
    for (const OutputRecord& out : outputs) {
      // A path holding a newline cannot be a line: that output is left out (so the run is not
      // recognised again, and the output is not kept from being replaced).
      if (out.path.find('\n') != std::string::npos) continue;
      text +=
          "output=" + std::to_string(out.size) + " " + hex(out.sample_hash) + " " + out.path + "\n";
    }
  };
  text += "command=" + record.command + "\n";
  for (const InputRecord& in : record.inputs) {
    std::string shown = in.path;  // only shown: inputs are compared by content
    std::ranges::replace(shown, '\n', ' ');
    text += "input=" + std::to_string(in.content.bytes) + " " + hex(in.content.hash) + " " + shown +
            "\n";
  }
  put_outputs(record.outputs);
  for (const EarlierRun& earlier : record.earlier) {
    text +=
        "earlier=" +
        (earlier.inputs_hash ? std::to_string(earlier.input_bytes) + " " + hex(*earlier.inputs_hash)
                             : std::string("-")) +
        "\n";
    text += "command=" + earlier.command + "\n";
    put_outputs(earlier.outputs);
  }
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

std::optional<RunRecord> decode_run_record(std::span<const std::byte> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  RunRecord record;
  record.legacy = text.starts_with(kMagicV1);
  if (!record.legacy && !text.starts_with(kMagicV2) && !text.starts_with(kMagic)) {
    return std::nullopt;
  }
  const bool recalls = text.starts_with(kMagic);
  // "SIZE HASH PATH" after the key of an input or output line.
  const auto sized_path = [](const std::string& line, std::size_t from, std::uint64_t& size,
                             std::uint64_t& hash) {
    char* rest = nullptr;
    size = std::strtoull(line.c_str() + from, &rest, 10);
    hash = std::strtoull(rest, &rest, 16);
    return std::string(rest + (*rest == ' ' ? 1 : 0));
  };
  // Each run (the last, then each earlier= block) has exactly one command= line.
  bool commanded = false;
  std::size_t pos = kMagic.size();
  while (pos < text.size()) {
    const std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) return std::nullopt;
    const std::string line(text.substr(pos, end - pos));
    pos = end + 1;
    // Lines after an earlier= line are that earlier run's.
    EarlierRun* earlier = record.earlier.empty() ? nullptr : &record.earlier.back();
    if (line.starts_with(record.legacy ? "run=" : "command=")) {
      if (commanded) return std::nullopt;
      commanded = true;
      (earlier ? earlier->command : record.command) = line.substr(line.find('=') + 1);
    } else if (!record.legacy && !earlier && line.starts_with("input=")) {
      InputRecord in;
      in.path = sized_path(line, 6, in.content.bytes, in.content.hash);
      record.inputs.push_back(in);
    } else if (line.starts_with("output=")) {
      OutputRecord out;
      out.path = sized_path(line, 7, out.size, out.sample_hash);
      (earlier ? earlier->outputs : record.outputs).push_back(out);
    } else if (recalls && commanded && line.starts_with("earlier=")) {
      EarlierRun next;
      if (line != "earlier=-") {
        // "BYTES HASH", the hash 16 hex digits.
        const char* bytes_at = line.c_str() + 8;
        char* rest = nullptr;
        next.input_bytes = std::strtoull(bytes_at, &rest, 10);
        // strtoull takes leading spaces and signs, which the record never writes.
        if (!std::isdigit(static_cast<unsigned char>(*bytes_at)) || rest == bytes_at ||
            *rest != ' ' || line.size() != 8 + static_cast<std::size_t>(rest - bytes_at) + 17) {
          return std::nullopt;
        }
        const char* hash_at = rest + 1;
        if (!std::isxdigit(static_cast<unsigned char>(*hash_at))) return std::nullopt;
        next.inputs_hash = std::strtoull(hash_at, &rest, 16);
        if (rest != hash_at + 16) return std::nullopt;
      }
      record.earlier.push_back(std::move(next));
      commanded = false;
    } else {
      return std::nullopt;
    }
  }
  if (!commanded) return std::nullopt;
  return record;
}

std::optional<std::string> outputs_differ(std::span<const OutputRecord> committed) {
  for (const OutputRecord& expected : committed) {
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
  // The runs to compare, the last first: what each committed and how to name it.
  struct Committed {
    std::span<const OutputRecord> outputs;
    std::string which;
    std::optional<std::string> why_other;  // why `run` is not that run
  };
  PlannedInputs inputs(run);
  std::vector<Committed> committed{{last.outputs, "the last run committed to " + state_path,
                                    why_not_the_same_run(last, run, inputs)}};
  for (std::size_t i = 0; i < last.earlier.size() && committed.front().why_other; ++i) {
    committed.push_back({last.earlier[i].outputs,
                         "a run committed to " + state_path + " " + std::to_string(i + 1) +
                             (i == 0 ? " run" : " runs") + " before the last",
                         why_not_the_earlier_run(last.earlier[i], run, inputs)});
  }
  for (std::size_t k = 0; k < committed.size(); ++k) {
    Committed& that = committed[k];
    if (that.why_other) continue;
    const auto why = outputs_differ(that.outputs);
    if (!why) return Rerun::committed;
    // Outputs a later run wrote again (a job writing one path, whose inputs may hold the same
    // bytes again: a file delivered twice) are that run's: this is not "that run again" but a
    // new run, and what of it is still in place is kept below, as any output.
    const auto rewritten = [&] {
      for (std::size_t later = 0; later < k; ++later) {
        for (const OutputRecord& out : committed[later].outputs) {
          for (const OutputRecord& own : that.outputs) {
            if (resolved(out.path) == resolved(own.path)) return true;
          }
        }
      }
      return false;
    };
    if (!force && !rewritten()) {
      throw Error(state_path + " already holds this run (same command, same inputs), " +
                  "committed earlier as " + that.which + ", but " + *why +
                  ": the outputs cannot be computed again from it; restore the outputs, or pass "
                  "--force to run it again anyway (they will hold only the records whose keys " +
                  state_path + " does not hold yet)");
    }
    that.why_other = "it reads the bytes that run read, but " + *why + " since that run";
  }
  if (force) return Rerun::new_run;
  for (const std::string& out : run.outputs) {
    if (out == "-") continue;
    const std::string target = resolved(out);
    for (const Committed& that : committed) {
      for (const OutputRecord& written : that.outputs) {
        if (resolved(written.path) != target || written.size == 0) continue;
        const auto now = record_output(out);
        if (!now || now->size != written.size || now->sample_hash != written.sample_hash) {
          continue;  // no longer what that run committed: nothing of it to lose
        }
        throw Error(
            out + " holds the output of " + that.which +
            ", and this run is not that run: " + *that.why_other + ". It would replace " + out +
            " with the records whose keys " + state_path +
            " does not hold yet; nothing was changed. If that run is the one meant, its "
            "result is already in " +
            out +
            "; to keep it, write this run's output elsewhere (-o, --dups or --refused another "
            "file); to replace it, pass --force");
      }
    }
  }
  return Rerun::new_run;
}

}  // namespace bulkbloom::cli
