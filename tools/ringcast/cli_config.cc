// `ringcast config check|print`: load the effective configuration (file + RINGCAST_* variables)
// and either validate it or print it with secrets masked.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "engine/build.h"
#include "engine/config.h"
#include "tools/ringcast/cli_commands.h"

namespace ringcast::cli {
namespace {

Config load(const GlobalOptions& g) {
  try {
    return load_config(g.config_path, process_environment());
  } catch (const ConfigError& e) {
    throw CliError(std::string("config: ") + e.what());
  }
}

}  // namespace

void add_config_commands(CLI::App& app, GlobalOptions& g) {
  CLI::App* cfg = app.add_subcommand("config", "check or print the configuration");
  cfg->require_subcommand(1);

  CLI::App* check = cfg->add_subcommand("check", "validate the config file and environment");
  check->callback([&g] {
    Config c = load(g);
    // What `serve` would refuse at start (docs/operations.md "Validation"), caught here too.
    if (const std::string problem = engine::transport_problem(c); !problem.empty())
      throw CliError("config: " + problem);
    for (const auto& w : c.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (c.server.api_token.empty()) {
      std::fprintf(stderr,
                   "warning: server.api_token is empty: every /v1 request will get 401 (set it "
                   "or RINGCAST_API_TOKEN)\n");
    }
    std::printf("config ok: %s (%zu custom policies, %u shards, listen %s)\n",
                c.source.empty() ? "defaults + environment" : c.source.c_str(), c.policies.size(),
                c.engine.shards, c.server.listen.c_str());
  });

  auto show_secrets = std::make_shared<bool>(false);  // owned by the callback below
  CLI::App* print = cfg->add_subcommand("print", "print the effective config (secrets masked)");
  print->add_flag("--show-secrets", *show_secrets, "print secrets in clear");
  print->callback([&g, show_secrets] {
    Config c = load(g);
    std::fputs(c.to_toml(!*show_secrets).c_str(), stdout);
  });
}

}  // namespace ringcast::cli
