/// @file
/// A description of this machine and of this build, read from the system (Linux /proc and /sys,
/// nvidia-smi when there is one), so that a benchmark report says what it ran on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bulkbloom::probe {

/// One cache as /sys describes it for CPU 0.
struct Cache {
  unsigned level = 0;
  std::string type;  ///< "Data", "Instruction" or "Unified".
  std::uint64_t size_bytes = 0;
  unsigned shared_by_cpus = 0;  ///< Logical CPUs that share one instance of this cache.
  unsigned instances = 0;       ///< Instances of this cache over the online CPUs.
};

/// One GPU.
struct Gpu {
  std::string name;
  std::uint64_t memory_bytes = 0;  ///< 0 when unknown.
  std::string driver;
};

/// What the system says about this machine. A field it does not tell is empty or 0.
struct Machine {
  std::string cpu_model;
  /// /proc/cpuinfo's "cpu family", "model", "stepping" and "microcode": what tells two CPUs of
  /// one marketing name apart. -1 (or empty) when not said.
  int cpu_family = -1, cpu_model_number = -1, cpu_stepping = -1;
  std::string microcode;
  bool virtual_machine = false;   ///< The CPU flags include "hypervisor".
  double cpu_mhz = 0;             ///< CPU 0's clock as /proc/cpuinfo reads it now.
  double cpu_max_mhz = 0;         ///< cpufreq's cpuinfo_max_freq; 0 when there is no cpufreq.
  unsigned threads_per_core = 0;  ///< SMT: logical CPUs over physical cores.
  unsigned logical_cpus = 0;      ///< Online logical CPUs.
  unsigned usable_cpus = 0;       ///< Logical CPUs this process may run on (its affinity mask).
  unsigned physical_cores = 0;
  unsigned sockets = 0;
  std::vector<Cache> caches;  ///< By level, data before instruction.
  std::uint64_t memory_bytes = 0;
  std::uint64_t memory_available_bytes = 0;
  std::string transparent_hugepages;         ///< The selected mode: "always", "madvise", "never".
  std::string transparent_hugepages_defrag;  ///< The selected defrag mode.
  unsigned numa_nodes = 0;
  std::string kernel;  ///< uname's system, release and machine.
  std::vector<Gpu> gpus;
};

/// How busy the machine is: the load averages and the CPU time counters of /proc/stat.
struct Load {
  double load_1min = 0, load_5min = 0, load_15min = 0;
  std::uint64_t steal_ticks = 0;  ///< Time the hypervisor gave this VM's CPUs to others.
  std::uint64_t idle_ticks = 0;   ///< idle + iowait.
  std::uint64_t total_ticks = 0;
};
Load read_load();

/// Reads the description from the system.
Machine describe_machine();

/// MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
std::uint64_t available_memory_bytes();

/// The fraction of [`begin`, `begin` + `bytes`) that this process has on transparent huge pages,
/// from /proc/self/smaps (AnonHugePages of each mapping that overlaps the range, counted in
/// proportion to the overlap); a negative value when the system does not say.
double huge_page_coverage(const void* begin, std::uint64_t bytes);

/// The compiler this code was built with, e.g. "GCC 12.2.0".
std::string compiler_description();

/// The git commit this code was built from ("-dirty" appended when the checkout had changes;
/// "unknown" outside a checkout), as of the last build.
std::string git_commit();

/// The build type and C++ flags the probes were compiled with, as the library's.
std::string build_flags();

/// bulkbloom's version, from the project's CMake version.
std::string library_version();

}  // namespace bulkbloom::probe
