// The filter file format's entry points for payloads that are a part of a filter (shards): the
// header records the whole layout and which shard of how many the payload holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "bulkbloom/format.hpp"

namespace bulkbloom::detail {

/// A payload's place: shard `shard` of `num_shards` of `layout` (a whole filter is shard 0 of 1).
struct PayloadPlace {
  Layout layout;
  std::uint32_t shard = 0;
  std::uint32_t num_shards = 1;
};

/// Saves `bits` (the shard's blocks as a filter of their own) as shard `place` atomically.
void save_payload(const Filter& bits, const PayloadPlace& place, const std::filesystem::path& path,
                  const FileState& state);

/// Reads and verifies a filter or shard file: its bits as a filter of their own
/// (detail::local_layout), and in `place` where they belong.
Filter load_payload(const std::filesystem::path& path, FileState* state, const Options& options,
                    PayloadPlace& place);

/// The bytes save_payload() writes, in memory.
std::vector<std::byte> payload_file_bytes(const Filter& bits, const PayloadPlace& place,
                                          const FileState& state);

/// load_payload() of a file's bytes held in memory; `source` names them in errors.
Filter load_payload(std::span<const std::byte> bytes, FileState* state, const Options& options,
                    PayloadPlace& place, const std::string& source);

/// As load_payload(), mapping the file as map() does.
Filter map_payload(const std::filesystem::path& path, FileState* state, const MapOptions& options,
                   PayloadPlace& place);

}  // namespace bulkbloom::detail
