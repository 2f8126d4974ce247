#include "core/key_hash.hpp"

#include <stdexcept>

// Inlined so the installed library needs no libxxhash at link time.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace bulkbloom::detail {

std::uint64_t xxh64_bytes(std::string_view bytes, std::uint64_t seed) {
  return XXH64(bytes.data(), bytes.size(), seed);
}

void check_byte_keys_allowed(const Layout& layout) {
  if (layout.hash == KeyHash::identity) {
    throw std::invalid_argument(
        "byte-string keys need a hashing layout: this filter's key hash is identity, which takes "
        "uint64_t keys that are already hashes");
  }
}

}  // namespace bulkbloom::detail
