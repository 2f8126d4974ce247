// bulkbloom: the command-line tool. Dispatches to a subcommand and turns errors into messages
// and exit codes (2 for usage mistakes, 1 for everything else).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/errors.hpp"
#include "cli/output_file.hpp"

namespace {

constexpr const char* kUsage =
    "usage: bulkbloom COMMAND [options] [ARGS]\n"
    "\n"
    "Deduplicate and membership-test huge key dumps with a blocked Bloom filter.\n"
    "\n"
    "commands:\n"
    "  dedup   write the first occurrence of each key, in input order\n"
    "  build   insert every key of a dump into a new saved filter\n"
    "  query   write the records of a dump that a saved filter has seen\n"
    "  info    describe a saved filter\n"
    "  merge   save the union of saved filters\n"
    "  convert copy a carried filter or window between a file and a state directory\n"
    "  gen     write a test dump with duplicates\n"
    "  bench   measure this machine's memory limits and each backend against them\n"
    "\n"
    "  help    this text, or with a COMMAND its options\n"
    "\n"
    "Run 'bulkbloom COMMAND --help' for a command's options; 'bulkbloom --version' for the "
    "version.\n";

struct Command {
  const char* name;
  int (*run)(const bulkbloom::cli::Arguments&);
};

constexpr Command kCommands[] = {
    {"dedup", bulkbloom::cli::run_dedup}, {"build", bulkbloom::cli::run_build},
    {"query", bulkbloom::cli::run_query}, {"info", bulkbloom::cli::run_info},
    {"merge", bulkbloom::cli::run_merge}, {"convert", bulkbloom::cli::run_convert},
    {"gen", bulkbloom::cli::run_gen},     {"bench", bulkbloom::cli::run_bench},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::string(argv[1]) == "--version" || std::string(argv[1]) == "version") {
    std::printf("bulkbloom %s\n", BULKBLOOM_VERSION);
    return 0;
  }
  std::string name = argv[1];
  std::vector<char*> rest(argv + 2, argv + argc);
  if (name == "help") {
    if (rest.empty()) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    name = rest.front();  // "help dedup" is "dedup --help"
    static char help_flag[] = "--help";
    rest = {help_flag};
  }
  const Command* command = nullptr;
  for (const Command& c : kCommands) {
    if (name == c.name) command = &c;
  }
  if (command == nullptr) {
    std::fprintf(stderr, "bulkbloom: unknown command '%s'\n\n%s", name.c_str(), kUsage);
    return 2;
  }
  bulkbloom::cli::install_output_signal_handlers();
  const bulkbloom::cli::Arguments args(rest.begin(), rest.end());
  try {
    return command->run(args);
  } catch (const bulkbloom::cli::ReaderGone&) {
    return 141;
  } catch (const bulkbloom::cli::UsageError& e) {
    std::fprintf(stderr, "bulkbloom %s: %s\n(see 'bulkbloom %s --help')\n", name.c_str(), e.what(),
                 name.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bulkbloom %s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
}
