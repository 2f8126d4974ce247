// Error types of the command-line tool, on top of the library's.
#pragma once

#include <bulkbloom/error.hpp>
#include <bulkbloom/format.hpp>

#include <string>

namespace bulkbloom::cli {

// Files and streams that cannot be opened, read or written throw the library's IoError.
using bulkbloom::IoError;

/// Input data that does not match its declared format; the message names the file and line.
class DataError : public Error {
 public:
  using Error::Error;
};

/// The reader of stdout went away (`bulkbloom dedup ... | head`): not a failure to report, but
/// nothing more can be written, and nothing is committed. The tool exits 141 (128 + SIGPIPE) in
/// silence, as a program killed by SIGPIPE would.
class ReaderGone : public Error {
 public:
  using Error::Error;
};

/// "<what>: <strerror(errno)>" for the errno of the call that just failed.
std::string with_errno(const std::string& what);

}  // namespace bulkbloom::cli
