// `ringcast`: the daemon (`serve`) and its command-line client (send, endpoints, deliveries,
// config, version). Exit codes: 0 ok, 1 error (bad flags, bad file, unreachable server, an
// error answer), 2 `send` finished but some events were rejected.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "engine/config.h"
#include "engine/version.h"
#include "log/log.h"
#include "tools/ringcast/cli_commands.h"
#include "tools/ringcast/serve.h"

int main(int argc, char** argv) {
  using namespace ringcast;
  CLI::App app{"ringcast — webhook delivery engine (daemon and client)", "ringcast"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may come after the subcommand
  cli::GlobalOptions g;
  cli::add_global_options(app, g);

  CLI::App* serve = app.add_subcommand("serve", "run the daemon (until SIGTERM)");
  serve->callback([&g] {
    Config cfg;
    try {
      cfg = load_config(g.config_path, process_environment());
    } catch (const ConfigError& e) {
      throw cli::CliError(std::string("config: ") + e.what());
    }
    log::configure(log_options(cfg));
    for (const auto& w : cfg.warnings) {
      if (log::format() == log::Format::kJson) {
        log::warn("config_warning", {}, "warning: {}", w);
      } else {
        std::fprintf(stderr, "warning: %s\n", w.c_str());  // as before the log existed
      }
    }
    g.exit_code = run_serve(cfg);
  });

  cli::add_send_command(app, g);
  cli::add_endpoint_commands(app, g);
  cli::add_delivery_commands(app, g);
  cli::add_config_commands(app, g);
  cli::add_tenant_commands(app, g);
  cli::add_intake_commands(app, g);
  cli::add_cluster_commands(app, g);
  cli::add_key_commands(app, g);
  cli::add_replay_commands(app, g);

  CLI::App* version = app.add_subcommand("version", "print the version");
  version->callback([&g] {
    if (g.json) {
      std::printf("{\"version\":\"%s\"}\n", version_string());
    } else {
      std::printf("ringcast %s\n", version_string());
    }
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // usage errors: message on stderr, non-zero (0 for --help)
  } catch (const cli::CliError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ringcast: %s\n", e.what());
    return e.code();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ringcast: %s\n", e.what());
    return cli::kExitError;
  }
  return g.exit_code;
}
