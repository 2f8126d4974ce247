#include "probe/machine.hpp"

#include "build_id.hpp"  // BULKBLOOM_GIT_COMMIT, written by build_id.cmake at each build

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace bulkbloom::probe {
namespace {

namespace fs = std::filesystem;

// The first line of a file without its newline; empty when it cannot be read.
std::string first_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t");
  const auto last = s.find_last_not_of(" \t\r\n");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

// The value after "key:" on the first line of `path` that starts with `key`.
std::string field_of(const fs::path& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(key)) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return trim(line.substr(colon + 1));
    }
  }
  return {};
}

// The value after "key:" on the first line of `path` whose name (before the colon) is exactly
// `key`: /proc/cpuinfo has both "model" and "model name".
std::string exact_field_of(const fs::path& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == key) {
      return trim(line.substr(colon + 1));
    }
  }
  return {};
}

// A whole number, or -1 for empty text.
int number_or_unknown(const std::string& text) {
  return text.empty() ? -1 : static_cast<int>(std::strtol(text.c_str(), nullptr, 0));
}

// The leading decimal number of `text`; 0 when there is none.
std::uint64_t number_of(const std::string& text) {
  return std::strtoull(text.c_str(), nullptr, 10);
}

// "32K", "1024K", "32M" as /sys writes cache sizes.
std::uint64_t parse_size(const std::string& text) {
  std::uint64_t value = 0;
  std::size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i)
    value = value * 10 + (text[i] - '0');
  if (i < text.size()) {
    switch (text[i]) {
      case 'K':
        return value << 10;
      case 'M':
        return value << 20;
      case 'G':
        return value << 30;
    }
  }
  return value;
}

// The CPU numbers in a list like "0-3,8,10-11".
std::vector<unsigned> parse_cpu_list(const std::string& text) {
  std::vector<unsigned> cpus;
  std::stringstream in(text);
  for (std::string range; std::getline(in, range, ',');) {
    range = trim(range);
    if (range.empty()) continue;
    const auto dash = range.find('-');
    const unsigned first = static_cast<unsigned>(std::stoul(range.substr(0, dash)));
    const unsigned last = dash == std::string::npos
                              ? first
                              : static_cast<unsigned>(std::stoul(range.substr(dash + 1)));
    for (unsigned c = first; c <= last; ++c) cpus.push_back(c);
  }
  return cpus;
}

// The bracketed choice in a /sys/kernel/mm/transparent_hugepage file: "always [madvise] never".
std::string selected_mode(const fs::path& path) {
  const std::string line = first_line(path);
  const auto open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return line;
  return line.substr(open + 1, close - open - 1);
}

std::vector<Cache> read_caches(const std::vector<unsigned>& online) {
  std::vector<Cache> caches;
  const fs::path cpu0 = "/sys/devices/system/cpu/cpu0/cache";
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(cpu0, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("index")) continue;
    Cache cache;
    cache.level = static_cast<unsigned>(number_of(first_line(entry.path() / "level")));
    cache.type = first_line(entry.path() / "type");
    cache.size_bytes = parse_size(first_line(entry.path() / "size"));
    cache.shared_by_cpus =
        static_cast<unsigned>(parse_cpu_list(first_line(entry.path() / "shared_cpu_list")).size());
    // Instances: the distinct sharing sets of this index over the online CPUs.
    std::set<std::string> sets;
    for (unsigned cpu : online) {
      sets.insert(first_line(fs::path("/sys/devices/system/cpu") / ("cpu" + std::to_string(cpu)) /
                             "cache" / name / "shared_cpu_list"));
    }
    cache.instances = static_cast<unsigned>(sets.size());
    if (cache.level != 0 && cache.size_bytes != 0) caches.push_back(cache);
  }
  std::sort(caches.begin(), caches.end(), [](const Cache& a, const Cache& b) {
    return std::pair(a.level, a.type) < std::pair(b.level, b.type);
  });
  return caches;
}

// Name, memory and driver of each GPU: nvidia-smi when it runs, else what the NVIDIA driver
// shows under /proc (no memory size there).
std::vector<Gpu> read_gpus() {
  std::vector<Gpu> gpus;
  if (FILE* smi = popen(
          "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits "
          "2>/dev/null",
          "r")) {
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, smi)) {
      std::stringstream line(buffer);
      std::string name, memory_mib, driver;
      if (std::getline(line, name, ',') && std::getline(line, memory_mib, ',') &&
          std::getline(line, driver)) {
        Gpu gpu;
        gpu.name = trim(name);
        gpu.memory_bytes = number_of(trim(memory_mib)) << 20;
        gpu.driver = trim(driver);
        gpus.push_back(gpu);
      }
    }
    pclose(smi);
  }
  if (!gpus.empty()) return gpus;
  const std::string version = first_line("/proc/driver/nvidia/version");
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/proc/driver/nvidia/gpus", error)) {
    Gpu gpu;
    gpu.name = field_of(entry.path() / "information", "Model");
    gpu.driver = version;
    gpus.push_back(gpu);
  }
  return gpus;
}

}  // namespace

std::uint64_t available_memory_bytes() {
  return parse_size(field_of("/proc/meminfo", "MemAvailable")) << 10;
}

Machine describe_machine() {
  Machine m;
  m.cpu_model = field_of("/proc/cpuinfo", "model name");
  m.cpu_family = number_or_unknown(exact_field_of("/proc/cpuinfo", "cpu family"));
  m.cpu_model_number = number_or_unknown(exact_field_of("/proc/cpuinfo", "model"));
  m.cpu_stepping = number_or_unknown(exact_field_of("/proc/cpuinfo", "stepping"));
  m.microcode = exact_field_of("/proc/cpuinfo", "microcode");
  std::stringstream flags(exact_field_of("/proc/cpuinfo", "flags"));
  for (std::string flag; flags >> flag;) m.virtual_machine |= flag == "hypervisor";
  m.cpu_mhz = std::strtod(exact_field_of("/proc/cpuinfo", "cpu MHz").c_str(), nullptr);
  m.cpu_max_mhz = static_cast<double>(number_of(
                      first_line("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))) /
                  1000;
  const std::vector<unsigned> online = parse_cpu_list(first_line("/sys/devices/system/cpu/online"));
  m.logical_cpus = static_cast<unsigned>(online.size());
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) m.usable_cpus = CPU_COUNT(&mask);
  std::set<std::pair<std::string, std::string>> cores;
  std::set<std::string> packages;
  for (unsigned cpu : online) {
    const fs::path topology =
        fs::path("/sys/devices/system/cpu") / ("cpu" + std::to_string(cpu)) / "topology";
    const std::string package = first_line(topology / "physical_package_id");
    cores.emplace(package, first_line(topology / "core_id"));
    packages.insert(package);
  }
  m.physical_cores = static_cast<unsigned>(cores.size());
  if (m.physical_cores > 0) m.threads_per_core = m.logical_cpus / m.physical_cores;
  m.sockets = static_cast<unsigned>(packages.size());
  m.caches = read_caches(online);
  m.memory_bytes = parse_size(field_of("/proc/meminfo", "MemTotal")) << 10;
  m.memory_available_bytes = available_memory_bytes();
  m.transparent_hugepages = selected_mode("/sys/kernel/mm/transparent_hugepage/enabled");
  m.transparent_hugepages_defrag = selected_mode("/sys/kernel/mm/transparent_hugepage/defrag");
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/sys/devices/system/node", error)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("node") && name.size() > 4 &&
        name.find_first_not_of("0123456789", 4) == std::string::npos) {
      ++m.numa_nodes;
    }
  }
  utsname names;
  if (uname(&names) == 0) {
    m.kernel = std::string(names.sysname) + " " + names.release + " " + names.machine;
  }
  m.gpus = read_gpus();
  return m;
}

double huge_page_coverage(const void* begin, std::uint64_t bytes) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps || bytes == 0) return -1;
  const auto first = reinterpret_cast<std::uintptr_t>(begin);
  const std::uintptr_t last = first + bytes;
  double huge_bytes = 0;
  std::uintptr_t start = 0, end = 0;  // the mapping whose fields are being read
  for (std::string line; std::getline(smaps, line);) {
    // A mapping's header: "7f12a0000000-7f12a8000000 rw-p ...".
    const auto dash = line.find('-');
    if (dash != std::string::npos && dash > 0 &&
        line.find_first_not_of("0123456789abcdef") == dash) {
      start = std::stoull(line.substr(0, dash), nullptr, 16);
      end = std::stoull(line.substr(dash + 1), nullptr, 16);
      continue;
    }
    if (!line.starts_with("AnonHugePages:") || end <= first || start >= last) continue;
    const double overlap =
        static_cast<double>(std::min(end, last) - std::max(start, first)) / (end - start);
    huge_bytes += overlap * static_cast<double>(number_of(trim(line.substr(14))) << 10);
  }
  return std::min(1.0, huge_bytes / static_cast<double>(bytes));
}

std::string compiler_description() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown compiler";
#endif
}

Load read_load() {
  Load load;
  std::ifstream loadavg("/proc/loadavg");
  loadavg >> load.load_1min >> load.load_5min >> load.load_15min;
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice" (guest time is
  // counted in user and nice already).
  std::ifstream stat("/proc/stat");
  std::string label;
  std::uint64_t ticks[8] = {};
  stat >> label;
  for (auto& t : ticks) stat >> t;
  if (label == "cpu") {
    for (auto t : ticks) load.total_ticks += t;
    load.idle_ticks = ticks[3] + ticks[4];
    load.steal_ticks = ticks[7];
  }
  return load;
}

std::string git_commit() {
  return BULKBLOOM_GIT_COMMIT;
}

std::string build_flags() {
  return BULKBLOOM_BUILD_FLAGS;
}

std::string library_version() {
  return BULKBLOOM_VERSION;
}

}  // namespace bulkbloom::probe
