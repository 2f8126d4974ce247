// The backend registry (backend.hpp): one list of implementations, in the spirit of simdjson's
// available_implementations, each with a factory; the only file that includes both backends.
#include "registry/backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "bulkbloom/error.hpp"
#include "cpu/cpu_engine.hpp"

#if BULKBLOOM_HAVE_CUDA
#include "cuda/cuda_engine.hpp"
#endif

namespace bulkbloom {
namespace detail {
namespace {

constexpr std::string_view kImplEnvironmentVariable = "BULKBLOOM_IMPL";

struct Entry {
  Implementation info;
  CpuTarget cpu{};  // kernels == nullptr: the CUDA entry
};

Entry cpu_entry(const CpuTarget& target) {
  return {{std::string("cpu/") + target.kernels->target, Backend::cpu, true, ""}, target};
}

// Built once: which CPU targets run here and whether a CUDA device answers do not change while
// the process runs.
const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = [] {
    std::vector<Entry> list;
    for (const CpuTarget& target : highway_targets()) list.push_back(cpu_entry(target));
    list.push_back(cpu_entry(scalar_target()));
#if BULKBLOOM_HAVE_CUDA
    std::string why;
    const std::string arch = cuda_device_arch(&why);
    if (arch.empty()) {
      list.push_back({{"cuda", Backend::cuda, false, why}});
    } else {
      list.push_back({{"cuda/" + arch, Backend::cuda, true, ""}});
    }
#endif
    return list;
  }();
  return entries;
}

// Read once, so that every filter, window and mapped file of the process agrees on it.
const std::string& forced_implementation() {
  static const std::string forced = [] {
    const char* value = std::getenv(kImplEnvironmentVariable.data());
    return std::string(value != nullptr ? value : "");
  }();
  return forced;
}

bool is_cpu_name(const std::string& name) {
  return name == "cpu" || name.starts_with("cpu/");
}
bool is_cuda_name(const std::string& name) {
  return name == "cuda" || name.starts_with("cuda/");
}

bool belongs_to(const std::string& name, Backend backend) {
  switch (backend) {
    case Backend::automatic:
      return true;
    case Backend::cpu:
      return is_cpu_name(name);
    case Backend::cuda:
      return is_cuda_name(name);
  }
  return false;
}

std::string usable_names() {
  std::string names;
  for (const std::string& name : available_implementations()) {
    names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

// The usable entry called `name`, or the best usable one of a backend for "cpu" / "cuda".
const Entry& find(const std::string& name) {
  if (!is_cpu_name(name) && !is_cuda_name(name)) {
    throw std::invalid_argument("unknown implementation '" + name +
                                "': expected cpu, cpu/<target>, cuda or cuda/sm_XY (" +
                                std::string(kImplEnvironmentVariable) + " or Options)");
  }
  for (const Entry& entry : registry()) {
    if (entry.info.usable && (entry.info.name == name || entry.info.name.starts_with(name + "/"))) {
      return entry;
    }
  }
  if (is_cpu_name(name)) {
    throw BackendUnavailable(
        "CPU implementation '" + name +
        "' is not available in this build on this CPU; available: " + usable_names());
  }
  for (const Entry& entry : registry()) {
    if (entry.info.backend != Backend::cuda) continue;
    if (!entry.info.usable) {
      throw BackendUnavailable("the CUDA backend is built but " + entry.info.unusable_reason +
                               "; use backend cpu or auto");
    }
    throw BackendUnavailable("CUDA implementation '" + name +
                             "' is not available: the current device is " + entry.info.name);
  }
  throw BackendUnavailable("implementation '" + name +
                           "' needs the CUDA backend, which this build of bulkbloom does not "
                           "include; use backend cpu");
}

const Entry& choose(const Options& options) {
  if (!options.implementation.empty()) {
    if (!belongs_to(options.implementation, options.backend)) {
      throw std::invalid_argument("implementation '" + options.implementation +
                                  "' does not belong to the requested backend");
    }
    return find(options.implementation);
  }
  const std::string& forced = forced_implementation();
  if (!forced.empty() && belongs_to(forced, options.backend)) return find(forced);
  if (options.backend == Backend::cuda) return find("cuda");
  if (options.backend == Backend::automatic) {
    for (const Entry& entry : registry()) {
      if (entry.info.backend == Backend::cuda && entry.info.usable) return entry;
    }
  }
  return find("cpu");
}

// The threads of engines made with `threads` (Options::threads). Every engine left at 0 shares
// one pool of a worker per hardware thread: a pool per filter ran a worker per filter and core,
// so a window's generations put several polling workers on each core.
std::shared_ptr<ThreadPool> worker_pool(unsigned threads) {
  if (threads != 0) return std::make_shared<ThreadPool>(threads);
  static const auto shared =
      std::make_shared<ThreadPool>(std::max(1u, std::thread::hardware_concurrency()));
  return shared;
}

std::unique_ptr<Engine> make_cpu(const Entry& entry, const Layout& layout, const Options& options,
                                 HostBuffer&& storage) {
  auto workers = worker_pool(options.threads);
  auto engine = make_cpu_engine(layout, *entry.cpu.kernels, workers, std::move(storage));
  engine->set_host(std::make_shared<const HostSide>(HostSide{entry.cpu.host, std::move(workers)}));
  return engine;
}

}  // namespace

const HostKernels& best_cpu_host_kernels() {
  // The registry lists the CPU targets best first, the scalar reference last.
  return *registry().front().cpu.host;
}

std::unique_ptr<Engine> make_engine(const Layout& layout, const Options& options) {
  const Entry& entry = choose(options);
#if BULKBLOOM_HAVE_CUDA
  if (entry.info.backend == Backend::cuda) {
    // The host work around a GPU filter (a window's hashing) runs on the best CPU target, on the
    // calling thread: each of its lookups is one call to the device.
    static const auto host = std::make_shared<const HostSide>(
        HostSide{registry().front().cpu.host, std::make_shared<ThreadPool>(1)});
    std::unique_ptr<Engine> engine;
    if (options.backend == Backend::automatic && options.implementation.empty() &&
        forced_implementation().empty()) {
      // Chosen, not asked for: the CPU takes the filter when the device has too little free
      // memory for it.
      std::string why;
      engine = make_cuda_engine_if_usable(layout, &why);
      if (engine == nullptr)
        return make_cpu(find("cpu"), layout, options, HostBuffer(layout.size_bytes()));
    } else {
      engine = make_cuda_engine(layout, entry.info.name.substr(std::string_view("cuda/").size()));
    }
    engine->set_host(host);
    return engine;
  }
#endif
  return make_cpu(entry, layout, options, HostBuffer(layout.size_bytes()));
}

std::unique_ptr<Engine> make_engine_over_file(const Layout& layout, const Options& options, int fd,
                                              std::uint64_t offset) {
  if (!options.implementation.empty() && !is_cpu_name(options.implementation)) {
    throw std::invalid_argument("map() runs on the CPU backend; implementation '" +
                                options.implementation + "' is not a CPU one");
  }
  if (options.backend == Backend::cuda) {
    throw std::invalid_argument(
        "map() runs on the CPU backend, not the cuda one asked for: load() puts a file's "
        "filter on the GPU");
  }
  Options on_cpu = options;
  on_cpu.backend = Backend::cpu;
  return make_cpu(choose(on_cpu), layout, on_cpu,
                  HostBuffer::map_file_private(fd, offset, layout.size_bytes()));
}

}  // namespace detail

std::vector<Implementation> implementations() {
  std::vector<Implementation> list;
  for (const detail::Entry& entry : detail::registry()) list.push_back(entry.info);
  return list;
}

std::vector<std::string> available_implementations() {
  std::vector<std::string> names;
  for (const detail::Entry& entry : detail::registry()) {
    if (entry.info.usable) names.push_back(entry.info.name);
  }
  return names;
}

}  // namespace bulkbloom
