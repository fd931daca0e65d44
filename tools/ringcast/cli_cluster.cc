// `ringcast cluster status`: this node's view of cluster mode (GET /v1/cluster, operations.md §7) —
// the live members and how many partitions rendezvous assigns each, the partitions this node holds
// (as ranges, with their epochs), the Redis nodes and the lease counters. A node that does not run
// in cluster mode answers 404 not_cluster: a one-line message and exit code 1.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/ringcast/cli_commands.h"

namespace ringcast::cli {
namespace {

constexpr size_t kLineWidth = 100;

// "0-3,7,9-12" from ascending partitions, wrapped at kLineWidth with `indent` spaces on the
// continuation lines (the first line is assumed to start `first_col` columns in).
std::string partition_ranges(const std::vector<int64_t>& ps, size_t first_col, size_t indent) {
  std::vector<std::string> items;
  for (size_t i = 0; i < ps.size();) {
    size_t j = i;
    while (j + 1 < ps.size() && ps[j + 1] == ps[j] + 1) ++j;
    std::string item = std::to_string(ps[i]);
    if (j > i) item += "-" + std::to_string(ps[j]);
    items.push_back(std::move(item));
    i = j + 1;
  }
  std::string out;
  size_t col = first_col;
  for (size_t i = 0; i < items.size(); ++i) {
    std::string piece = items[i] + (i + 1 < items.size() ? "," : "");
    if (col + piece.size() > kLineWidth && col > indent) {
      out += "\n" + std::string(indent, ' ');
      col = indent;
    }
    out += piece;
    col += piece.size();
  }
  return out;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string render(simdjson::dom::element root, const std::string& body) {
  simdjson::dom::array members, owned, redis;
  simdjson::dom::element counters_el;
  if (root["members"].get(members) || root["owned"].get(owned) || root["redis_nodes"].get(redis) ||
      root["counters"].get(counters_el) || !counters_el.is_object()) {
    throw CliError("unexpected answer: " + clip(body, 200));
  }
  const std::string self = jstr(root, "node_id");
  std::string out;
  out += "node:        " + self + "\n";
  out += std::string("synced:      ") +
         (jbool(root, "synced") ? "yes" : "no (no heartbeat answered yet)") + "\n";

  std::vector<int64_t> parts;
  int64_t min_epoch = 0, max_epoch = 0;
  for (simdjson::dom::element o : owned) {
    const int64_t e = jint(o, "epoch");
    if (parts.empty() || e < min_epoch) min_epoch = e;
    if (parts.empty() || e > max_epoch) max_epoch = e;
    parts.push_back(jint(o, "partition"));
  }
  std::sort(parts.begin(), parts.end());
  const int64_t releasing = jint(root, "releasing");

  out += "members:     " + std::to_string(members.size()) + "\n";
  std::vector<std::pair<std::string, std::string>> rows;
  size_t name_w = 0, assigned_w = 0;
  bool self_listed = false;
  for (simdjson::dom::element m : members) {
    rows.emplace_back(jstr(m, "node_id"), std::to_string(jint(m, "assigned")));
    name_w = std::max(name_w, rows.back().first.size());
    assigned_w = std::max(assigned_w, rows.back().second.size());
  }
  for (const auto& [name, assigned] : rows) {
    std::string line = "  " + pad(name, name_w) + "  assigned " + pad(assigned, assigned_w);
    if (name == self) {
      self_listed = true;
      line += "  (this node: owns " + std::to_string(parts.size()) + ", releasing " +
              std::to_string(releasing) + ")";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  if (!self_listed) {
    out += "  (this node is not in the member list: owns " + std::to_string(parts.size()) +
           ", releasing " + std::to_string(releasing) + ")\n";
  }

  const std::string head = "partitions owned (" + std::to_string(parts.size()) + "): ";
  if (parts.empty()) {
    out += head + "none\n";
  } else {
    out += head + partition_ranges(parts, head.size(), 4) + "\n";
    out += min_epoch == max_epoch ? "epochs:      all " + std::to_string(min_epoch) + "\n"
                                  : "epochs:      " + std::to_string(min_epoch) + ".." +
                                        std::to_string(max_epoch) + "\n";
  }

  std::string nodes;
  for (simdjson::dom::element n : redis) {
    std::string_view v;
    if (!n.get(v)) nodes += (nodes.empty() ? "" : ", ") + std::string(v);
  }
  out += "redis nodes: " + (nodes.empty() ? std::string("-") : nodes) + "\n";

  std::string counters;
  for (const char* k :
       {"acquired", "released", "lost", "fenced", "acquire_refused", "renewals", "redis_errors"}) {
    counters += (counters.empty() ? "" : "  ") + std::string(k) + " " +
                std::to_string(jint(counters_el, k));
  }
  out += "counters:    " + counters + "\n";
  return out;
}

void run_status(GlobalOptions& g) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r;
  try {
    r = call_json(*client, p, "GET", "/v1/cluster");
  } catch (const CliError& e) {
    // call_json words an error answer "server answered <status> <code>: <message>".
    if (std::string_view(e.what()).starts_with("server answered 404 not_cluster")) {
      throw CliError("this node does not run in cluster mode");
    }
    throw;
  }
  if (g.json) return print_json(r.body);
  std::fputs(render(r.root, r.body).c_str(), stdout);
}

}  // namespace

void add_cluster_commands(CLI::App& app, GlobalOptions& g) {
  CLI::App* cl = app.add_subcommand("cluster", "cluster mode (partition ownership on Redis)");
  cl->require_subcommand(1);
  CLI::App* status = cl->add_subcommand(
      "status", "this node's view: members, partitions assigned and owned, counters");
  status->callback([&g] { run_status(g); });
}

}  // namespace ringcast::cli
