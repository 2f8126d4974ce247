// The temporary names under which the command line and the Python package stage an output before
// renaming it into place, and the rule by which a later run removes those a killed run left
// (docs/FORMAT.md). Both frontends call these, so that each removes the other's by one rule.
#pragma once

#include <filesystem>
#include <string>

namespace bulkbloom::detail {

/// The start of the temporary names of `output`: "DIR/.NAME.bulkbloom-" ("./" for a bare name).
/// A run adds its pid, a '-' and six characters of its own, and holds an exclusive flock on the
/// file from its creation to its rename.
std::string temporary_output_stem(const std::filesystem::path& output);

/// Removes the temporary outputs of `output` whose run is over without a rename (killed with
/// SIGKILL, or by a power loss): those whose pid is gone, and those whose lock is free and whose
/// last change is older than a grace period. A live pid proves nothing: a killed run may be an
/// unreaped zombie, and a restarted container hands out the same pids again. The grace covers
/// the instant between a file's creation and its lock, when only the pid can say it is dead.
/// Only regular files whose names read as stem + pid + '-' are candidates; whatever cannot be
/// read or removed is left (another run may remove it first).
void remove_dead_temporary_outputs(const std::filesystem::path& output);

}  // namespace bulkbloom::detail
