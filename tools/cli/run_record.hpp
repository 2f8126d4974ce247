// What identifies a dedup run (its options and the content of its inputs) and what it committed
// (its outputs), saved with the carried state so that a rerun can tell a run that already
// committed from a new one, and a checkpoint can refuse inputs that changed since it was made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bulkbloom::cli {

/// One line identifying a run: its arguments (less those that do not change what it writes:
/// --resume, --stats, --threads, --backend, --checkpoint, --checkpoint-every, --wait-lock) and, for
/// each input file, its size, modification time, inode and a hash of its first and last 64 KiB.
/// Empty when an input is not a regular file (stdin: nothing identifies it).
std::string run_fingerprint(const std::vector<std::string_view>& args,
                            const std::vector<std::string>& inputs);

/// An output as committed: its size and a hash of its first and last 64 KiB.
struct OutputRecord {
  std::string path;
  std::uint64_t size = 0;
  std::uint64_t sample_hash = 0;
};

/// The record of `path` as it is now, or nothing if it is not a regular file.
std::optional<OutputRecord> record_output(const std::string& path);

/// The run a carried state last took in: its fingerprint and outputs.
struct RunRecord {
  std::string fingerprint;
  std::vector<OutputRecord> outputs;
};

/// "key=value" text lines for the state's metadata.
std::vector<std::byte> encode_run_record(const RunRecord& record);
/// Parses encode_run_record()'s bytes; nothing for other bytes (empty, or an older version's).
std::optional<RunRecord> decode_run_record(std::span<const std::byte> bytes);

/// Why the outputs on disk are not those `record` committed, or nothing if they are.
std::optional<std::string> outputs_differ(const RunRecord& record);

}  // namespace bulkbloom::cli
