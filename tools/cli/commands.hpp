// The subcommands. Each takes its own arguments (after the subcommand name) and returns the
// process exit status; errors propagate as exceptions for main() to report.
#pragma once

#include <string_view>
#include <vector>

namespace bulkbloom::cli {

using Arguments = std::vector<std::string_view>;

int run_dedup(const Arguments& args);
int run_gen(const Arguments& args);
int run_bench(const Arguments& args);
int run_build(const Arguments& args);
int run_query(const Arguments& args);
int run_info(const Arguments& args);
int run_merge(const Arguments& args);
int run_convert(const Arguments& args);

}  // namespace bulkbloom::cli
