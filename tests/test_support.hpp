// Shared helpers for the tests: deterministic key streams and filter byte snapshots.
#pragma once

#include <gtest/gtest.h>
#include <bulkbloom/bulkbloom.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/splitmix64.hpp"

namespace bulkbloom::test {

using detail::SplitMix64;

/// `n` distinct-with-overwhelming-probability keys from `seed`.
inline std::vector<std::uint64_t> random_keys(std::size_t n, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<std::uint64_t> keys(n);
  for (auto& k : keys) k = rng.next();
  return keys;
}

/// `cold` distinct keys and `copies` copies of each of `hot` other keys, shuffled: hot keys
/// whose copies sit in every SIMD vector, thread, warp and pipeline chunk at once.
inline std::vector<std::uint64_t> hot_key_batch(std::size_t hot, std::size_t copies,
                                                std::size_t cold, std::uint64_t seed) {
  std::vector<std::uint64_t> batch = random_keys(cold, seed);
  const auto hot_keys = random_keys(hot, seed + 1);
  for (std::size_t c = 0; c < copies; ++c) {
    batch.insert(batch.end(), hot_keys.begin(), hot_keys.end());
  }
  std::shuffle(batch.begin(), batch.end(), std::mt19937_64(seed));
  return batch;
}

/// The filter's bytes.
inline std::vector<std::byte> bytes_of(const Filter& f) {
  std::vector<std::byte> out(f.layout().size_bytes());
  f.copy_bytes_to(out);
  return out;
}

/// A fresh directory under the system temporary directory, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string name = (std::filesystem::temp_directory_path() / "bulkbloom-test-XXXXXX").string();
    path_ = ::mkdtemp(name.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// The whole contents of a file.
inline std::vector<std::byte> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

/// Replaces a file's contents with `bytes`.
inline void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

/// The message of the `Exception` that `f()` throws; a test failure if it throws none.
template <typename Exception, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

/// Every shape, for parameterised tests: the shape table's list.
inline constexpr auto kAllShapes = detail::kAllShapes;

/// Test-name-safe shape name.
inline std::string shape_name(Shape s) {
  return std::string(to_string(s));
}

}  // namespace bulkbloom::test
