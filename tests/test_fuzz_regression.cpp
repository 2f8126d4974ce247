// Replays the fuzz corpus (seeds and every input that once crashed a reader) through the filter,
// Parquet, grown filter and window readers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <bulkbloom/grown_filter.hpp>
#include <bulkbloom/window.hpp>

#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

TEST(FuzzRegression, CorpusInputsGiveAFilterOrAFormatError) {
  const std::filesystem::path corpus = BULKBLOOM_FUZZ_CORPUS;
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(content.data()),
                                           content.size());
    try {
      load(bytes);
    } catch (const FormatError&) {
    }
    try {
      from_parquet(bytes);
    } catch (const FormatError&) {
    }
    try {
      GrownFilter::load(bytes);
    } catch (const FormatError&) {
    }
    try {
      load_window(entry.path());
    } catch (const FormatError&) {
    }
    ++files;
  }
  EXPECT_GT(files, 0u) << "no corpus in " << corpus;
}

}  // namespace
}  // namespace bulkbloom::test
