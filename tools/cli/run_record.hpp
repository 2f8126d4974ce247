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

#include "cli/args.hpp"
#include "cli/chunk_reader.hpp"

namespace bulkbloom::cli {

/// One line identifying a run for its checkpoints: its arguments (less those that do not change
/// what it writes: --resume, --stats, --threads, --backend, --checkpoint, --checkpoint-every,
/// --wait-lock, --force) and, for each input file, its size, modification time, inode and a hash
/// of its first and last 64 KiB. Empty when an input is not a regular file (stdin: nothing
/// identifies it).
std::string run_fingerprint(const std::vector<std::string_view>& args,
                            const std::vector<std::string>& inputs);

/// The options of a run that decide what it writes from its inputs against an existing state:
/// all given options but those that only change how it runs (as for run_fingerprint(), and
/// --buffer-size), the paths compared on their own (--output, --dups, --refused, --filter) and the
/// sizing options (--capacity, --fpr, --shape, --seed, --index, --on-full), which a state that
/// exists overrides with its own.
std::string run_command(const ArgParser& parser);

/// An input as a committed run read it: its bytes and their XXH3-64.
struct InputRecord {
  std::string path;  ///< As given (only shown: inputs are compared by content).
  InputContent content;
};

/// All the bytes of the regular file `path`, counted and hashed as ChunkReader hashes what it
/// reads; nothing for "-" (stdin) or a file of another kind. Throws IoError.
std::optional<InputContent> content_of(const std::string& path);

/// An output as committed: its size and a hash of its first and last 64 KiB.
struct OutputRecord {
  std::string path;  ///< Absolute, links resolved.
  std::uint64_t size = 0;
  std::uint64_t sample_hash = 0;
};

/// The record of `path` as it is now, or nothing if it is not a regular file.
std::optional<OutputRecord> record_output(const std::string& path);

/// A run committed before the last one, as the state recalls it: what recognises it again and
/// what keeps its outputs from being replaced, its inputs folded into one hash.
struct EarlierRun {
  std::string command;  ///< run_command()
  /// inputs_hash() of what it read; nothing when an input could not be read again.
  std::optional<std::uint64_t> inputs_hash;
  std::uint64_t input_bytes = 0;  ///< What it read, all inputs together.
  std::vector<OutputRecord> outputs;
};

/// How many runs a state recalls: the last and this many less one before it.
inline constexpr std::size_t kRunsRecalled = 100;

/// The run a carried state last took in, and those it recalls before it.
struct RunRecord {
  std::string command;  ///< run_command(); in a version 1 record, its run_fingerprint().
  bool legacy = false;  ///< A version 1 record: no inputs, only the fingerprint.
  /// Every input, when all were regular files; empty when one was not (it cannot be compared).
  std::vector<InputRecord> inputs;
  std::vector<OutputRecord> outputs;
  /// The runs committed before it, newest first, at most kRunsRecalled - 1.
  std::vector<EarlierRun> earlier;
};

/// XXH3-64 of each input's byte count and hash, in order: the inputs of an EarlierRun.
std::uint64_t inputs_hash(std::span<const InputContent> inputs);

/// The runs `record`'s commit recalls after it: `last` (the run the state last took in, if any)
/// followed by those `last` recalls, kRunsRecalled - 1 at most.
std::vector<EarlierRun> runs_before(const std::optional<RunRecord>& last);

/// "key=value" text lines for the state's metadata (version 3; docs/FORMAT.md, "Committing a
/// run"). An output whose path holds a newline, which a line cannot carry, is left out.
std::vector<std::byte> encode_run_record(const RunRecord& record);
/// Parses encode_run_record()'s bytes, or a version 1 or 2 record; nothing for other bytes.
std::optional<RunRecord> decode_run_record(std::span<const std::byte> bytes);

/// Why the outputs on disk are not those committed (`committed`), or nothing if they are.
std::optional<std::string> outputs_differ(std::span<const OutputRecord> committed);

/// A run about to start, as a rerun check sees it.
struct PlannedRun {
  std::string command;              ///< run_command()
  std::string fingerprint;          ///< run_fingerprint(), for version 1 records
  std::vector<std::string> inputs;  ///< As given; "-" for stdin.
  std::vector<std::string>
      outputs;  ///< As given (-o, --dups, then --refused if given); "-": stdout.
};

/// What a run is to the run a state last committed.
enum class Rerun {
  new_run,    ///< Another run: go on.
  committed,  ///< That very run, committed already, its outputs in place: nothing to do.
};

/// Compares `run` with `last`, the run that the state at `state_path` last committed, and with
/// the runs it recalls before it (docs/FORMAT.md, "Reruns"). It is one of them when it has the
/// same command and outputs and its inputs hold the bytes that run read (for the last run
/// compared by size, then by a hash of all their bytes; for an earlier one by inputs_hash()):
/// then, if the outputs are still those committed, returns Rerun::committed; if a later run
/// wrote one of them again, it is a new run; otherwise it throws Error (the state already holds
/// the run's keys: the outputs cannot be made again from it) unless `force`. Another run that
/// would replace a non-empty output of one of them still as committed throws Error saying how
/// to go on, unless `force`. Nothing is written either way.
Rerun check_rerun(const RunRecord& last, const PlannedRun& run, const std::string& state_path,
                  bool force);

}  // namespace bulkbloom::cli
