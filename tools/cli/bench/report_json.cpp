#include "cli/bench/report_json.hpp"

#include <cmath>
#include <stdexcept>

namespace bulkbloom::cli::bench_report {
namespace {

Json strings(const std::vector<std::string>& values) {
  Json array = Json::array();
  for (const auto& v : values) array.push(v);
  return array;
}

Json numbers(const std::vector<double>& values) {
  Json array = Json::array();
  for (double v : values) array.push(v);
  return array;
}
Json quartiles(const Spread& spread) {
  return Json::array().push(spread.low).push(spread.high);
}

Spread spread(const Json& json, std::string_view what) {
  const auto& items = json.items(what);
  if (items.size() != 2) throw std::runtime_error(std::string(what) + " is not [low, high]");
  return {items[0].number(what), items[1].number(what)};
}

// A fraction that may be unknown (negative): null in JSON.
Json fraction(double value) {
  return value < 0 ? Json() : Json(value);
}

double fraction(const Json& json, std::string_view what) {
  return json.kind() == Json::Kind::null ? -1 : json.number(what);
}

Json rate(const detail::DeviceRate& r, double limit) {
  Json item = Json::object()
                  .set("operation", r.operation)
                  .set("runs_keys_per_s", numbers(r.runs))
                  .set("keys_per_s", r.keys_per_s);
  if (limit > 0) item.set("fraction_of_limit", r.keys_per_s / limit);
  return item;
}

detail::DeviceRate rate(const Json& json) {
  detail::DeviceRate r;
  r.operation = json.at("operation").string("gpu operation");
  for (const Json& run : json.at("runs_keys_per_s").items("gpu runs_keys_per_s")) {
    r.runs.push_back(run.number("gpu runs_keys_per_s"));
  }
  r.keys_per_s = json.at("keys_per_s").number("gpu keys_per_s");
  return r;
}

Json gpu_section(const GpuSection& gpu) {
  Json cases = Json::array();
  for (const detail::DeviceBench& c : gpu.cases) {
    const double limit = c.random_block_reads.keys_per_s;
    Json device = Json::array();
    for (const auto& r : c.device_resident) device.push(rate(r, limit));
    Json host = Json::array();
    for (const auto& r : c.host_resident) host.push(rate(r, 0));
    cases.push(Json::object()
                   .set("implementation", c.implementation)
                   .set("stand_in", c.stand_in)
                   .set("filter_bytes", c.filter_bytes)
                   .set("block_bytes", c.block_bytes)
                   .set("keys_per_call", c.keys)
                   .set("verified_keys", c.verified_keys)
                   .set("random_block_reads", rate(c.random_block_reads, 0))
                   .set("device_resident", std::move(device))
                   .set("host_resident_end_to_end", std::move(host)));
  }
  return Json::object()
      .set("absent", gpu.absent)
      .set("failures", strings(gpu.failures))
      .set("cases", std::move(cases));
}

GpuSection gpu_section(const Json& json) {
  GpuSection gpu;
  gpu.absent = json.at("absent").string("gpu absent");
  for (const Json& f : json.at("failures").items("gpu failures"))
    gpu.failures.push_back(f.string("gpu failure"));
  for (const Json& item : json.at("cases").items("gpu cases")) {
    detail::DeviceBench c;
    c.implementation = item.at("implementation").string("gpu implementation");
    c.stand_in = item.at("stand_in").string("gpu stand_in");
    c.filter_bytes = item.at("filter_bytes").whole("gpu filter_bytes");
    c.block_bytes = static_cast<std::uint32_t>(item.at("block_bytes").whole("gpu block_bytes"));
    c.keys = static_cast<std::uint32_t>(item.at("keys_per_call").whole("gpu keys_per_call"));
    c.verified_keys =
        static_cast<std::uint32_t>(item.at("verified_keys").whole("gpu verified_keys"));
    // A figure the CPU did not confirm is no figure.
    if (c.verified_keys == 0) throw std::runtime_error("a GPU case has no verified keys");
    c.random_block_reads = rate(item.at("random_block_reads"));
    for (const Json& r : item.at("device_resident").items("gpu device_resident"))
      c.device_resident.push_back(rate(r));
    for (const Json& r : item.at("host_resident_end_to_end").items("gpu host_resident_end_to_end"))
      c.host_resident.push_back(rate(r));
    gpu.cases.push_back(std::move(c));
  }
  return gpu;
}

}  // namespace

Json to_json(const Report& report, const Comparison* comparison) {
  Json root = Json::object();
  root.set("schema", "bulkbloom-bench-report");
  root.set("schema_version", kSchemaVersion);
  root.set("date", report.date);
  root.set("command", strings(report.command));
  root.set("machine", report.machine);
  root.set("settings", report.settings);
  root.set("conditions", report.conditions);
  root.set("warnings", strings(report.warnings));
  Json limits = Json::array();
  for (const Limits& l : report.limits) {
    limits.push(Json::object()
                    .set("filter_bytes", l.filter_bytes)
                    .set("threads", l.threads)
                    .set("all_threads", l.all_threads)
                    .set("random_read_lines_per_s", l.random_read_lines_per_s)
                    .set("random_rmw_lines_per_s", l.random_rmw_lines_per_s)
                    .set("seq_read_bytes_per_s", l.seq_read_bytes_per_s)
                    .set("huge_pages", fraction(l.huge_pages)));
  }
  root.set("limits", std::move(limits));
  Json latency = Json::array();
  for (const Latency& l : report.latency) {
    latency.push(Json::object()
                     .set("filter_bytes", l.filter_bytes)
                     .set("dependent_load_ns", l.dependent_load_ns)
                     .set("implementation", l.implementation)
                     .set("one_key_contains_ns", l.one_key_contains_ns));
  }
  root.set("latency", std::move(latency));
  Json cases = Json::array();
  for (const Case& c : report.cases) {
    Json item = Json::object()
                    .set("implementation", c.implementation)
                    .set("role", c.role)
                    .set("operation", c.operation)
                    .set("threads", c.threads)
                    .set("all_threads", c.all_threads)
                    .set("filter_bytes", c.filter_bytes)
                    .set("keys_per_call", c.keys_per_call)
                    .set("runs_keys_per_s", numbers(c.runs))
                    .set("keys_per_s", c.keys_per_s)
                    .set("noise", std::isnan(c.noise) ? Json() : Json(c.noise))
                    .set("limit", c.limit)
                    .set("runs_limit_lines_per_s", numbers(c.run_limits))
                    .set("limit_lines_per_s", c.limit_per_s())
                    .set("limit_quartiles", quartiles(c.limit_spread))
                    .set("remeasured", c.remeasured)
                    .set("probe_failure", c.probe_failure)
                    .set("huge_pages", fraction(c.huge_pages));
    if (!c.limit.empty()) item.set("fraction_of_limit", c.keys_per_s / c.limit_per_s());
    cases.push(std::move(item));
  }
  root.set("cases", std::move(cases));
  root.set("notes", strings(report.notes));
  root.set("gpu", gpu_section(report.gpu));
  if (comparison != nullptr) {
    Json differences = Json::array();
    for (const Difference& d : comparison->differences) {
      differences.push(Json::object()
                           .set("role", d.role)
                           .set("operation", d.operation)
                           .set("all_threads", d.all_threads)
                           .set("filter_bytes", d.filter_bytes)
                           .set("ratio", d.ratio)
                           .set("limit_ratio", d.limit_ratio)
                           .set("ratio_to_limit", d.ratio_to_limit)
                           .set("verdict", d.verdict)
                           .set("flagged", d.flagged));
    }
    root.set("comparison", Json::object()
                               .set("against", comparison->against)
                               .set("against_date", comparison->against_date)
                               .set("against_cpu", comparison->against_cpu)
                               .set("rule", summary(*comparison))
                               .set("warnings", strings(comparison->warnings))
                               .set("differences", std::move(differences)));
  }
  return root;
}

Report from_json(const Json& json) {
  if (json.kind() != Json::Kind::object || json.find("schema") == nullptr ||
      json.at("schema").kind() != Json::Kind::string ||
      json.at("schema").string() != "bulkbloom-bench-report") {
    throw std::runtime_error(
        "not a bulkbloom bench report (no \"schema\": \"bulkbloom-bench-report\")");
  }
  const double version = json.at("schema_version").number("schema_version");
  if (version != std::floor(version) || version < kOldestReadableVersion ||
      version > kSchemaVersion) {
    throw std::runtime_error(
        "report schema version " + format("%g", version) + ", this bulkbloom reads versions " +
        std::to_string(kOldestReadableVersion) + " to " + std::to_string(kSchemaVersion));
  }
  Report report;
  report.date = json.at("date").string("date");
  for (const Json& arg : json.at("command").items("command"))
    report.command.push_back(arg.string("command"));
  report.machine = json.at("machine");
  report.machine.members("machine");
  report.settings = json.at("settings");
  report.settings.members("settings");
  report.conditions = json.at("conditions");
  for (const Json& warning : json.at("warnings").items("warnings")) {
    report.warnings.push_back(warning.string("warning"));
  }
  for (const Json& l : json.at("limits").items("limits")) {
    report.limits.push_back({l.at("filter_bytes").whole("limits filter_bytes"),
                             static_cast<unsigned>(l.at("threads").whole("limits threads")),
                             l.at("all_threads").boolean("limits all_threads"),
                             l.at("random_read_lines_per_s").number("random_read_lines_per_s"),
                             l.at("random_rmw_lines_per_s").number("random_rmw_lines_per_s"),
                             l.at("seq_read_bytes_per_s").number("seq_read_bytes_per_s"),
                             fraction(l.at("huge_pages"), "limits huge_pages")});
  }
  for (const Json& l : json.at("latency").items("latency")) {
    report.latency.push_back({l.at("filter_bytes").whole("latency filter_bytes"),
                              l.at("dependent_load_ns").number("dependent_load_ns"),
                              l.at("implementation").string("latency implementation"),
                              l.at("one_key_contains_ns").number("one_key_contains_ns")});
  }
  for (const Json& item : json.at("cases").items("cases")) {
    Case c;
    c.implementation = item.at("implementation").string("implementation");
    c.role = item.at("role").string("role");
    c.operation = item.at("operation").string("operation");
    c.threads = static_cast<unsigned>(item.at("threads").whole("threads"));
    c.all_threads = item.at("all_threads").boolean("all_threads");
    c.filter_bytes = item.at("filter_bytes").whole("filter_bytes");
    c.keys_per_call = item.at("keys_per_call").whole("keys_per_call");
    for (const Json& r : item.at("runs_keys_per_s").items("runs_keys_per_s")) {
      c.runs.push_back(r.number("runs_keys_per_s"));
    }
    c.keys_per_s = item.at("keys_per_s").number("keys_per_s");
    const Json& noise = item.at("noise");
    c.noise = noise.kind() == Json::Kind::null ? std::nan("") : noise.number("noise");
    c.limit = item.at("limit").string("limit");
    for (const Json& l : item.at("runs_limit_lines_per_s").items("runs_limit_lines_per_s")) {
      c.run_limits.push_back(l.number("runs_limit_lines_per_s"));
    }
    if (!c.run_limits.empty() && c.run_limits.size() != c.runs.size()) {
      throw std::runtime_error("a case has " + std::to_string(c.runs.size()) + " runs but " +
                               std::to_string(c.run_limits.size()) + " runs_limit_lines_per_s");
    }
    c.limit_spread = spread(item.at("limit_quartiles"), "limit_quartiles");
    c.remeasured = item.at("remeasured").boolean("remeasured");
    c.probe_failure = item.at("probe_failure").boolean("probe_failure");
    c.huge_pages = fraction(item.at("huge_pages"), "huge_pages");
    report.cases.push_back(std::move(c));
  }
  for (const Json& note : json.at("notes").items("notes"))
    report.notes.push_back(note.string("note"));
  if (version >= 4) {
    report.gpu = gpu_section(json.at("gpu"));
  } else {
    report.gpu.absent =
        "this report (schema version " + format("%g", version) + ") predates the GPU section";
  }
  return report;
}
}  // namespace bulkbloom::cli::bench_report
