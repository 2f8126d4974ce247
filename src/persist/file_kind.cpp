// Which kind of bulkbloom file a path holds, from its magic bytes (docs/FORMAT.md).
#include <fcntl.h>

#include <cstring>

#include "bulkbloom/format.hpp"
#include "persist/file_io.hpp"

namespace bulkbloom {

FileKind file_kind(const std::filesystem::path& path) {
  const detail::File file(path, O_RDONLY);
  std::byte magic[8] = {};
  if (file.regular_file_size() < sizeof magic) return FileKind::unknown;
  file.read_exactly(magic, sizeof magic, 0);
  if (std::memcmp(magic, detail::kGrownMagic, sizeof magic) == 0) return FileKind::grown_filter;
  if (std::memcmp(magic, detail::kWindowMagic, sizeof magic) == 0) return FileKind::window;
  if (std::memcmp(magic, detail::kFilterMagic, sizeof magic) == 0) {
    return read_info(path).num_shards > 1 ? FileKind::filter_shard : FileKind::filter;
  }
  return FileKind::unknown;
}

}  // namespace bulkbloom
