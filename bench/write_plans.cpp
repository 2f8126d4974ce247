// Each write plan forced, side by side in one process, over the same loaded filter and batches as
// bench_filter's `insert/.../batch:64Ki` cases: for insert, one thread, and on two threads routed
// key slices (each key hashed once and routed to its block's owner; the plan by size from 1 MiB
// up to 1 GiB; forced at every size), block ranges (below 1 GiB) or partitions (from 1 GiB), atomic
// key slices, and the atomic kernel alone on one thread; for insert_if_absent, one thread against
// block ranges or partitions and routed key slices. The engine times some of these against each
// other call by call (cpu/plan_chooser.hpp), so bench_filter shows only the mix it settled on; this
// shows each plan alone (#37). Cases that are no plan of the library sit beside them: block ranges
// over keys hashed once (a second run() a call), four run()s of the pool that do nothing (what a
// join costs), "2 tasks on 1T": a two-task plan's tasks run one after the other on one thread, its
// work without any wait for a core, and "pre-routed (ceiling)": each batch's keys split by owner
// before timing, each task inserting its own with the one-thread kernel, what two threads could
// gain with routing free.
//
//   write_plans [--sizes 2MiB,32MiB,512MiB] [--impl AVX3] [--rounds 5] [--calls 256]
//               [--plans "1T,2T routed"]
//
// --impl: a Highway target this CPU runs, or "scalar"; the best one by default.
// --plans: only the plans whose names start with one of these (the 1T plans are always run: the
// speed-ups are on them), so that a profiler sees one plan's code alone.
//
// Rounds alternate the plans' order; each figure is ns a key over `calls` calls of 2^16 keys,
// starting from the loaded bytes, in wall time and in the process's CPU time (all threads). On a
// machine shared with other work the wall time counts the waits for a core, and the CPU time a
// pool's polling while it waits for a descheduled peer; "2 tasks on 1T" counts neither, so its
// tasks times the one-thread CPU time over its own is what two free cores could gain at most,
// the memory not being the limit. The load average is printed beside each size.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "bench_clock.hpp"
#include "bulkbloom/layout.hpp"
#include "core/splitmix64.hpp"
#include "core/thread_pool.hpp"
#include "cpu/host_buffer.hpp"
#include "cpu/kernels.hpp"
#include "cpu/partitioned.hpp"

namespace {

using namespace bulkbloom;
using bench::median;
using bench::process_cpu_seconds;
using detail::BulkOp;
using detail::BulkPlan;

constexpr std::uint64_t kBitsPerKey = 16;  // as bench_filter
constexpr std::size_t kBatch = std::size_t{1} << 16;
constexpr std::size_t kBatchPool = 64;

std::uint64_t key_at(std::uint64_t stream, std::uint64_t i) {  // bench_filter's keys
  return detail::splitmix64_mix(i + (stream << 48) + detail::kSplitMix64Gamma);
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return load;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    items.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return items;
}

std::uint64_t parse_size(const std::string& text) {
  const std::uint64_t n = std::stoull(text);
  if (text.find("GiB") != std::string::npos) return n << 30;
  if (text.find("MiB") != std::string::npos) return n << 20;
  if (text.find("KiB") != std::string::npos) return n << 10;
  return n;
}

struct PlanCase {
  std::string name;
  detail::ThreadPool* pool;
  std::function<void(std::byte* bits, const std::uint64_t* keys)> run;  // one call of kBatch keys
  std::string base = "1T";  // the one-thread case its speed-ups are on
  unsigned tasks = 0;       // its tasks, where not one a thread of `pool`
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> sizes = {"2MiB", "32MiB", "512MiB"};
  std::vector<std::string> plans;  // empty: all
  std::string impl;
  int rounds = 5;
  std::size_t calls = 4 * kBatchPool;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--sizes") {
      sizes = split_commas(value);
    } else if (arg == "--plans") {
      plans = split_commas(value);
    } else if (arg == "--impl") {
      impl = value;
    } else if (arg == "--rounds") {
      rounds = std::stoi(value);
    } else if (arg == "--calls") {
      calls = std::stoul(value);
    } else {
      std::fprintf(stderr, "unknown option %s\n", arg.c_str());
      return 2;
    }
  }
  auto targets = detail::highway_targets();
  targets.push_back(detail::scalar_target());
  const detail::CpuKernels* kernels = nullptr;
  for (const auto& target : targets) {
    if (impl.empty() || impl == target.kernels->target) {
      kernels = target.kernels;
      break;
    }
  }
  if (kernels == nullptr) {
    std::fprintf(stderr, "no target %s on this CPU\n", impl.c_str());
    return 2;
  }
  detail::ThreadPool one(1), two(2);
  std::vector<std::uint64_t> keys(kBatch * kBatchPool);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = key_at(2, i);
  std::printf("impl cpu/%s, %zu calls of %zu keys a figure\n", kernels->target, calls, kBatch);
  std::printf(
      "| filter | plan | wall ns/key | wall speed-up on 1T | CPU ns/key | threads × 1T CPU / CPU | "
      "load |\n|---|---|---|---|---|---|---|\n");
  for (const std::string& size : sizes) {
    const Layout layout{Shape::sb512, parse_size(size) / 64};
    const std::uint64_t capacity = layout.size_bytes() * 8 / kBitsPerKey;
    // The engine's memory (2 MiB pages where the host gives them), not a vector's 4 KiB pages:
    // a page walk a key would otherwise be part of every figure from 32 MiB up.
    const detail::HostBuffer loaded(layout.size_bytes()), bits(layout.size_bytes());
    std::vector<std::uint64_t> chunk;
    for (std::uint64_t first = 0; first < capacity; first += std::uint64_t{1} << 24) {
      chunk.resize(std::min<std::uint64_t>(std::uint64_t{1} << 24, capacity - first));
      for (std::size_t i = 0; i < chunk.size(); ++i) chunk[i] = key_at(0, first + i);
      kernels->insert(layout, loaded.data(), chunk.data(), chunk.size(),
                      detail::KeyMode::hash_with_layout, detail::all_blocks(layout));
    }
    detail::PartitionScratch scratch;
    detail::RoutedScratch routed;
    const auto by_plan = [&](const BulkPlan& plan, detail::ThreadPool& pool) {
      return [&, plan](std::byte* bits, const std::uint64_t* batch) {
        detail::insert_by_plan(plan, *kernels, layout, bits, batch, kBatch,
                               detail::KeyMode::hash_with_layout, pool, scratch, routed);
      };
    };
    // The plans by size on two threads (none below kMinParallelWriteFilterBytes, routed key slices
    // up to 1 GiB, partitions from 1 GiB) and, forced, routed key slices at every size and block
    // ranges below 1 GiB.
    const BulkPlan by_size = detail::plan_bulk(BulkOp::insert, layout, kBatch, 2);
    const bool partitioned = by_size.mode == BulkPlan::Mode::partitioned;
    std::vector<PlanCase> cases = {
        {"1T", &one, by_plan(detail::plan_bulk(BulkOp::insert, layout, kBatch, 1), one)}};
    if (partitioned) {
      cases.push_back({"2T partitioned", &two, by_plan(by_size, two)});
    } else {
      cases.push_back(
          {"2T block ranges", &two, by_plan(BulkPlan{BulkPlan::Mode::block_ranges, 2, 0}, two)});
    }
    cases.push_back(
        {"2T routed", &two, by_plan(BulkPlan{BulkPlan::Mode::routed_key_slices, 2, 0}, two)});
    const BulkPlan atomic{BulkPlan::Mode::atomic_key_slices, 2, 0};
    cases.push_back({"2T atomic key slices", &two, by_plan(atomic, two)});
    // The atomic kernel's own cost against the plain one's.
    cases.push_back({"1T atomic kernel", &one,
                     by_plan(BulkPlan{BulkPlan::Mode::atomic_key_slices, 1, 0}, one)});
    // Not a plan of the library: block ranges over keys hashed once, each task hashing half of
    // them into a shared buffer first (a second run() a call), against block ranges' hashing of
    // every key by every task.
    std::vector<std::uint64_t> hashed(kBatch);
    if (!partitioned) {
      cases.push_back(
          {"2T block ranges, hashed once", &two, [&](std::byte* bits, const std::uint64_t* batch) {
             two.run(2, [&](unsigned t) {
               const std::size_t begin = kBatch * t / 2, end = kBatch * (t + 1) / 2;
               kernels->hash(layout, batch + begin, end - begin, detail::KeyMode::hash_with_layout,
                             hashed.data() + begin);
             });
             two.run(2, [&](unsigned t) {
               kernels->insert(layout, bits, hashed.data(), kBatch, detail::KeyMode::prehashed,
                               detail::task_blocks(layout, t, 2));
             });
           }});
    }
    // Not a plan: the ceiling of every plan that hands each task the keys of its own blocks. The
    // keys of each batch are split by their block's task before timing, so each task inserts
    // its share with the one-thread kernel and nothing is paid for routing: against 1T, what
    // two threads of this kernel can gain on this machine at all (#37). (The pool hands tasks to
    // whichever thread claims them: a worker late for a call leaves both to the caller.)
    // Filled only where those cases run (not for partitioned sizes); the cases hold references.
    std::vector<std::vector<std::uint64_t>> own_keys(kBatchPool * 2);
    std::vector<std::uint8_t> own_flags(kBatch);
    if (!partitioned) {
      const detail::BlockRange first = detail::task_blocks(layout, 0, 2);
      std::vector<std::uint64_t> hashes(kBatch);
      for (std::size_t b = 0; b < kBatchPool; ++b) {
        const std::uint64_t* batch = keys.data() + b * kBatch;
        kernels->hash(layout, batch, kBatch, detail::KeyMode::hash_with_layout, hashes.data());
        for (std::size_t i = 0; i < kBatch; ++i) {
          const bool second = layout.block_of(hashes[i]) >= first.end;
          own_keys[b * 2 + (second ? 1 : 0)].push_back(batch[i]);
        }
      }
      const auto batch_of = [&keys](const std::uint64_t* batch) {
        return static_cast<std::size_t>(batch - keys.data()) / kBatch;
      };
      for (const bool dedup_keys : {false, true}) {
        cases.push_back(
            {dedup_keys ? "insert_if_absent 2T pre-routed (ceiling)" : "2T pre-routed (ceiling)",
             &two,
             [&, batch_of, dedup_keys](std::byte* bits, const std::uint64_t* batch) {
               const std::size_t b = batch_of(batch);
               two.run(2, [&](unsigned t) {
                 const std::vector<std::uint64_t>& own = own_keys[b * 2 + t];
                 constexpr auto kHashed = detail::KeyMode::hash_with_layout;
                 if (dedup_keys) {  // each task's flags in its own half, as a plan's would be
                   kernels->insert_if_absent(layout, bits, own.data(), own.size(), kHashed,
                                             detail::all_blocks(layout),
                                             own_flags.data() + (t == 0 ? 0 : kBatch - own.size()));
                 } else {
                   kernels->insert(layout, bits, own.data(), own.size(), kHashed,
                                   detail::all_blocks(layout));
                 }
               });
             },
             dedup_keys ? "insert_if_absent 1T" : "1T"});
      }
    }
    // Nothing but the pool: four run()s of two tasks that do nothing a call of kBatch keys (the
    // figure times kBatch / 4 is the cost of one run()).
    cases.push_back({"2T four empty run()s", &two, [&](std::byte*, const std::uint64_t*) {
                       for (int step = 0; step < 4; ++step) two.run(2, [](unsigned) {});
                     }});
    // insert_if_absent's plans, forced, against its own kernel on one thread.
    std::vector<std::uint8_t> flags(kBatch);
    const auto dedup = [&](const BulkPlan& plan, detail::ThreadPool& pool) {
      return [&, plan](std::byte* bits, const std::uint64_t* batch) {
        constexpr auto kHashed = detail::KeyMode::hash_with_layout;
        switch (plan.mode) {
          case BulkPlan::Mode::block_ranges:
            detail::insert_if_absent_in_block_ranges(*kernels, layout, bits, batch, kBatch, kHashed,
                                                     flags.data(), pool, plan.tasks);
            return;
          case BulkPlan::Mode::routed_key_slices:
            routed.insert_if_absent(*kernels, layout, bits, batch, kBatch, kHashed, flags.data(),
                                    pool, plan.tasks);
            return;
          case BulkPlan::Mode::partitioned:
            scratch.run(BulkOp::insert_if_absent, *kernels, layout, bits, batch, kBatch, kHashed,
                        flags.data(), pool, plan.partition_shift);
            return;
          default:
            kernels->insert_if_absent(layout, bits, batch, kBatch, kHashed,
                                      detail::all_blocks(layout), flags.data());
        }
      };
    };
    const std::string dedup_1t = "insert_if_absent 1T";
    cases.push_back({dedup_1t, &one, dedup(BulkPlan{}, one), dedup_1t});
    cases.push_back({"insert_if_absent 2T block ranges", &two,
                     dedup(BulkPlan{BulkPlan::Mode::block_ranges, 2, 0}, two), dedup_1t});
    if (partitioned) {
      cases.push_back({"insert_if_absent 2T partitioned", &two,
                       dedup(detail::plan_bulk(BulkOp::insert_if_absent, layout, kBatch, 2), two),
                       dedup_1t});
    }
    cases.push_back({"insert_if_absent 2T routed", &two,
                     dedup(BulkPlan{BulkPlan::Mode::routed_key_slices, 2, 0}, two), dedup_1t});
    // The work of two tasks without the waits: both run one after the other on one thread, so on
    // a loaded host the CPU time counts no polling for a descheduled peer. 2 × 1T CPU over theirs
    // is what two free cores could gain at most.
    for (const auto& [op, name, mode] :
         {std::tuple{"", "block ranges", BulkPlan::Mode::block_ranges},
          std::tuple{"", "routed", BulkPlan::Mode::routed_key_slices},
          std::tuple{"insert_if_absent ", "block ranges", BulkPlan::Mode::block_ranges},
          std::tuple{"insert_if_absent ", "routed", BulkPlan::Mode::routed_key_slices}}) {
      const BulkPlan plan{mode, 2, 0};
      const bool insert = *op == '\0';
      PlanCase serial{std::string(op) + "2 tasks on 1T, " + name, &one, {}, dedup_1t, 2};
      if (insert) {
        serial.run = by_plan(plan, one);
        serial.base = "1T";
      } else {
        serial.run = dedup(plan, one);
      }
      cases.push_back(serial);
    }
    const auto unwanted = [&](const PlanCase& pc) {
      return pc.name != "1T" && pc.name != dedup_1t && !plans.empty() &&
             std::none_of(plans.begin(), plans.end(),
                          [&](const std::string& p) { return pc.name.rfind(p, 0) == 0; });
    };
    cases.erase(std::remove_if(cases.begin(), cases.end(), unwanted), cases.end());
    std::map<std::string, std::vector<double>> wall_ns, cpu_ns;
    std::vector<double> loads;
    const auto keys_done = static_cast<double>(calls * kBatch);
    for (int round = 0; round < rounds; ++round) {
      loads.push_back(load_average());
      for (std::size_t c = 0; c < cases.size(); ++c) {
        const PlanCase& pc = cases[(c + round) % cases.size()];
        std::memcpy(bits.data(), loaded.data(), bits.size());
        const auto begin = std::chrono::steady_clock::now();
        const double cpu_begin = process_cpu_seconds();
        for (std::size_t call = 0; call < calls; ++call) {
          pc.run(bits.data(), keys.data() + (call % kBatchPool) * kBatch);
        }
        cpu_ns[pc.name].push_back(1e9 * (process_cpu_seconds() - cpu_begin) / keys_done);
        wall_ns[pc.name].push_back(
            1e9 * std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() /
            keys_done);
      }
    }
    // Medians over rounds with their ranges; speed-ups per round, as the load moves between them.
    const auto cell = [](const std::vector<double>& v, const char* unit) {
      char text[64];
      std::snprintf(text, sizeof text, "%.2f%s (%.2f–%.2f)", median(v), unit,
                    *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
      return std::string(text);
    };
    for (const PlanCase& pc : cases) {
      std::vector<double> wall_gain, cpu_gain;
      for (int r = 0; r < rounds; ++r) {
        wall_gain.push_back(wall_ns[pc.base][r] / wall_ns[pc.name][r]);
        cpu_gain.push_back((pc.tasks != 0 ? pc.tasks : pc.pool->size()) * cpu_ns[pc.base][r] /
                           cpu_ns[pc.name][r]);
      }
      std::printf("| %s | %s | %s | %s | %s | %s | %.1f–%.1f |\n", size.c_str(), pc.name.c_str(),
                  cell(wall_ns[pc.name], "").c_str(), cell(wall_gain, "×").c_str(),
                  cell(cpu_ns[pc.name], "").c_str(), cell(cpu_gain, "×").c_str(),
                  *std::min_element(loads.begin(), loads.end()),
                  *std::max_element(loads.begin(), loads.end()));
    }
    std::fflush(stdout);
  }
  return 0;
}
