// An ingestion node for the kill-and-resume test: resumes from the window checkpoint in DIR (if
// any), truncates its output to the offset saved there, then dedups the rest of the test stream
// in batches, appending each batch's decisions to DIR/decisions and checkpointing after it.
// Usage: window_resume_worker DIR BATCH
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "window_stream.hpp"

namespace {

std::vector<std::byte> encode_offset(std::uint64_t offset) {
  std::vector<std::byte> bytes(sizeof offset);
  std::memcpy(bytes.data(), &offset, sizeof offset);
  return bytes;
}

std::uint64_t decode_offset(const std::vector<std::byte>& bytes) {
  std::uint64_t offset = 0;
  if (bytes.size() == sizeof offset) std::memcpy(&offset, bytes.data(), sizeof offset);
  return offset;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "window_resume_worker: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: window_resume_worker DIR BATCH");
  const std::filesystem::path dir = argv[1];
  const std::size_t batch = std::strtoull(argv[2], nullptr, 10);
  try {
    using namespace bulkbloom;
    const test::WindowStream stream = test::resume_test_stream();
    auto checkpoint = load_window_checkpoint(dir);
    WindowedFilter window =
        checkpoint ? std::move(checkpoint->window) : WindowedFilter(test::resume_test_config());
    std::uint64_t offset = checkpoint ? decode_offset(checkpoint->metadata) : 0;

    const int out = ::open((dir / "decisions").c_str(), O_WRONLY | O_CREAT, 0644);
    if (out < 0 || ::ftruncate(out, static_cast<off_t>(offset)) != 0 ||
        ::lseek(out, 0, SEEK_END) < 0) {
      return fail("cannot open the decisions file");
    }
    std::vector<std::uint8_t> is_new(batch);
    while (offset < stream.keys.size()) {
      const std::size_t n = std::min(batch, stream.keys.size() - offset);
      window.insert_if_absent(std::span(stream.keys).subspan(offset, n),
                              std::span(stream.times).subspan(offset, n),
                              std::span(is_new).first(n));
      // The sink first, then the checkpoint that says the sink holds this batch.
      if (::write(out, is_new.data(), n) != static_cast<ssize_t>(n)) {
        return fail("cannot write the decisions file");
      }
      offset += n;
      save_checkpoint(dir, window, {offset, encode_offset(offset)});
    }
    ::close(out);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}
