#include "key_hash.hpp"

// Inlined so the installed library needs no libxxhash at link time.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace bulkbloom::detail {

std::uint64_t xxh64_bytes(std::string_view bytes, std::uint64_t seed) {
  return XXH64(bytes.data(), bytes.size(), seed);
}

}  // namespace bulkbloom::detail
