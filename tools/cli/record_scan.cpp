#include "cli/record_scan.hpp"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>

#include "cli/progress.hpp"

namespace bulkbloom::cli {
namespace {

// A growable byte buffer without zero-filling.
struct ByteBuffer {
  std::unique_ptr<char[]> data;
  std::size_t size = 0;
  std::size_t capacity = 0;

  void reserve(std::size_t n) {
    if (n <= capacity) return;
    auto bigger = std::make_unique_for_overwrite<char[]>(n);
    std::memcpy(bigger.get(), data.get(), size);
    data = std::move(bigger);
    capacity = n;
  }
  void append(const char* p, std::size_t n) {
    std::memcpy(data.get() + size, p, n);
    size += n;
  }
  std::string_view view() const { return {data.get(), size}; }
};

// One chunk's output: records for each destination, and whether to sync after writing them.
struct OutputBatch {
  ByteBuffer flagged;
  ByteBuffer unflagged;
  ByteBuffer refused;
  bool sync_after = false;
};

// Writes batches on its own thread so that disk writes overlap the filter work.
class BatchWriter {
 public:
  static constexpr int kBatches = 2;

  BatchWriter(OutputFile* flagged, OutputFile* unflagged, OutputFile* refused)
      : flagged_(flagged), unflagged_(unflagged), refused_(refused) {
    for (int i = 0; i < kBatches; ++i) free_.push(std::make_unique<OutputBatch>());
    thread_ = std::thread([this] { run(); });
  }
  ~BatchWriter() {
    pending_.close();
    thread_.join();
  }

  std::unique_ptr<OutputBatch> take() {
    auto batch = std::move(*free_.pop());
    batch->flagged.size = 0;
    batch->unflagged.size = 0;
    batch->refused.size = 0;
    batch->sync_after = false;
    return batch;
  }

  void submit(std::unique_ptr<OutputBatch> batch) {
    rethrow_failure();
    pending_.push(std::move(batch));
  }

  // Waits until every submitted batch is written (and synced if asked), then reports failure.
  void drain() {
    std::vector<std::unique_ptr<OutputBatch>> all;
    for (int i = 0; i < kBatches; ++i) all.push_back(std::move(*free_.pop()));
    for (auto& batch : all) free_.push(std::move(batch));
    rethrow_failure();
  }

 private:
  void rethrow_failure() {
    if (failed_) std::rethrow_exception(error_);
  }

  void run() {
    while (auto batch = pending_.pop()) {
      if (!failed_) {
        try {
          write((*batch)->flagged, flagged_, (*batch)->sync_after);
          write((*batch)->unflagged, unflagged_, (*batch)->sync_after);
          write((*batch)->refused, refused_, (*batch)->sync_after);
        } catch (...) {
          error_ = std::current_exception();
          failed_ = true;
        }
      }
      free_.push(std::move(*batch));
    }
  }

  static void write(const ByteBuffer& bytes, OutputFile* out, bool sync) {
    if (out == nullptr) return;
    out->write(bytes.view());
    if (sync) out->sync();
  }

  OutputFile* flagged_;
  OutputFile* unflagged_;
  OutputFile* refused_;
  WorkQueue<std::unique_ptr<OutputBatch>> free_;
  WorkQueue<std::unique_ptr<OutputBatch>> pending_;
  std::exception_ptr error_;
  std::atomic<bool> failed_ = false;
  std::thread thread_;
};

// What a scan does with one chunk's keys: writes their flags, returns how many are set.
using KeyStage = std::function<std::uint64_t(const ParsedRecords& parsed,
                                             std::span<const std::uint64_t> int_keys,
                                             std::span<std::uint8_t> flags)>;

template <typename FilterType>
std::uint64_t apply(FilterType& filter, ScanAction action, const ParsedRecords& parsed,
                    std::span<const std::uint64_t> int_keys, std::span<std::uint8_t> flags) {
  if (action == ScanAction::contains) {
    if (parsed.byte_keys.empty()) {
      filter.contains(int_keys, flags);
    } else {
      filter.contains(std::span<const std::string_view>(parsed.byte_keys), flags);
    }
    std::uint64_t seen = 0;
    for (std::uint8_t f : flags) seen += f;
    return seen;
  }
  if (parsed.byte_keys.empty()) return filter.insert_if_absent(int_keys, flags);
  return filter.insert_if_absent(std::span<const std::string_view>(parsed.byte_keys), flags);
}

// Copies the u64 records whose flag is `keep` into `out`, in order, without branches.
void copy_u64_records_flagged(std::span<const std::uint64_t> keys, const std::uint8_t* flags,
                              std::uint8_t keep, ByteBuffer& out) {
  out.reserve(keys.size() * 8);
  char* data = out.data.get();
  std::size_t n = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::memcpy(data + 8 * n, &keys[i], 8);
    n += flags[i] == keep ? 1 : 0;
  }
  out.size = 8 * n;
}

// Sorts fixed-size u64 records by flag.
void split_u64_records(std::span<const std::uint64_t> keys, const std::uint8_t* flags,
                       OutputBatch& batch, bool want_flagged, bool want_unflagged) {
  if (want_flagged) copy_u64_records_flagged(keys, flags, 1, batch.flagged);
  if (want_unflagged) copy_u64_records_flagged(keys, flags, 0, batch.unflagged);
}

// Copies each text record to its destination; a final record without its newline gets one, so
// that outputs of several inputs never run two records together.
// Refused records (a flag above 1) go to batch.refused.
void split_text_records(std::string_view text, const ParsedRecords& parsed,
                        const std::uint8_t* flags, OutputBatch& batch, bool want_flagged,
                        bool want_unflagged, bool want_refused) {
  // After what the batch may hold already (a header line).
  if (want_flagged) batch.flagged.reserve(batch.flagged.size + text.size() + 1);
  if (want_unflagged) batch.unflagged.reserve(batch.unflagged.size + text.size() + 1);
  if (want_refused) batch.refused.reserve(batch.refused.size + text.size() + 1);
  for (std::size_t i = 0; i < parsed.begins.size(); ++i) {
    const bool refused = flags[i] > 1;
    ByteBuffer& dest = refused ? batch.refused : flags[i] ? batch.flagged : batch.unflagged;
    if (!(refused ? want_refused : flags[i] ? want_flagged : want_unflagged)) continue;
    const std::size_t begin = parsed.begins[i], end = parsed.ends[i];
    dest.append(text.data() + begin, end - begin);
    if (text[end - 1] != '\n') dest.append("\n", 1);
  }
}

void count_refused(std::span<const std::uint8_t> flags, ScanCounters& counters) {
  for (const std::uint8_t flag : flags) {
    counters.refused_missing_time += flag == refused_flag(TimeRefusal::missing) ? 1 : 0;
    counters.refused_future += flag == refused_flag(TimeRefusal::future) ? 1 : 0;
    counters.refused_late += flag == refused_flag(TimeRefusal::late) ? 1 : 0;
  }
}

// Runs every record of `reader` through `stage`; see run_scan().
ScanState scan_with(const KeyStage& stage, ChunkReader& reader, const ScanSettings& settings) {
  ScanState state = settings.start;
  const bool want_flagged = settings.flagged_out != nullptr;
  const bool want_unflagged = settings.unflagged_out != nullptr;
  const bool want_refused = settings.refused_out != nullptr;
  BatchWriter writer(settings.flagged_out, settings.unflagged_out, settings.refused_out);
  ProgressLine progress(settings.show_progress, reader.total_known() ? reader.total_bytes() : 0);
  ParsedRecords parsed;
  std::vector<std::uint8_t> flags;
  std::uint64_t records_at_checkpoint = state.counters.records;
  std::size_t current_input = state.position.input;

  while (std::unique_ptr<Chunk> chunk = reader.next()) {
    if (chunk->position.input != current_input) {
      current_input = chunk->position.input;
      state.next_line = 1;
    }
    std::span<const std::uint64_t> int_keys;
    // A header line opens each input (--header): not a record; the first input's is written.
    std::string_view text = chunk->text();
    std::string_view header;
    if (settings.format.header && chunk->position.offset == 0) {
      const std::size_t newline = text.find('\n');
      header = text.substr(0, newline == std::string_view::npos ? text.size() : newline + 1);
      text.remove_prefix(header.size());
      state.next_line += 1;
    }
    auto batch = writer.take();
    if (!header.empty() && current_input == 0) {
      for (ByteBuffer* out :
           {want_flagged ? &batch->flagged : nullptr, want_unflagged ? &batch->unflagged : nullptr,
            want_refused ? &batch->refused : nullptr}) {
        if (out == nullptr) continue;
        out->reserve(header.size() + 1);
        out->append(header.data(), header.size());
        if (header.back() != '\n') out->append("\n", 1);
      }
    }
    if (settings.format.kind == FormatKind::u64) {
      int_keys = chunk->words();
    } else {
      parse_text_records(settings.format, text, reader.input_name(current_input), state.next_line,
                         settings.skip_bad, parsed);
      int_keys = parsed.int_keys;
      state.next_line += parsed.lines;
      state.counters.skipped_bad += parsed.skipped_bad;
    }
    const std::size_t count = int_keys.size() + parsed.byte_keys.size();
    flags.resize(count);
    state.counters.flagged += stage(parsed, int_keys, flags);
    state.counters.records += count;
    state.counters.bytes += chunk->size;
    if (want_refused) count_refused(flags, state.counters);

    if (settings.format.kind == FormatKind::u64) {
      split_u64_records(int_keys, flags.data(), *batch, want_flagged, want_unflagged);
    } else {
      split_text_records(text, parsed, flags.data(), *batch, want_flagged, want_unflagged,
                         want_refused);
    }
    state.position = {current_input, chunk->position.offset + chunk->size};
    reader.recycle(std::move(chunk));

    const bool checkpoint_due =
        settings.checkpoint_every != 0 &&
        state.counters.records - records_at_checkpoint >= settings.checkpoint_every;
    batch->sync_after = checkpoint_due;
    writer.submit(std::move(batch));
    if (checkpoint_due) {
      writer.drain();
      settings.on_checkpoint(state);
      records_at_checkpoint = state.counters.records;
    }
    progress.update(state.counters.records, state.counters.bytes);
  }
  writer.drain();
  progress.finish();
  return state;
}

}  // namespace

ScanState run_scan(CarriedFilter& filter, ChunkReader& reader, const ScanSettings& settings) {
  return scan_with(
      [&](const ParsedRecords& parsed, auto int_keys, auto flags) {
        return apply(filter, settings.action, parsed, int_keys, flags);
      },
      reader, settings);
}

ScanState run_scan(DedupState& state, ChunkReader& reader, const ScanSettings& settings) {
  return scan_with([&](const ParsedRecords& parsed, auto int_keys,
                       auto flags) { return state.dedup(parsed, int_keys, flags); },
                   reader, settings);
}

}  // namespace bulkbloom::cli
