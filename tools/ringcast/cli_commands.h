// The `ringcast` client subcommands (docs/operations.md §3). Each adder registers its
// subcommands on `app`; they run from CLI11 callbacks, report through g.exit_code and throw
// CliError on failure.
#pragma once

#include "tools/ringcast/cli_common.h"

namespace ringcast::cli {

void add_endpoint_commands(CLI::App& app, GlobalOptions& g);  // endpoints list|create|...
void add_delivery_commands(CLI::App& app, GlobalOptions& g);  // deliveries list|recent|get
void add_send_command(CLI::App& app, GlobalOptions& g);       // send (NDJSON bulk intake)
void add_config_commands(CLI::App& app, GlobalOptions& g);    // config check|print
void add_tenant_commands(CLI::App& app, GlobalOptions& g);    // tenant breaker|subscription|...
void add_intake_commands(CLI::App& app, GlobalOptions& g);    // intake status
void add_cluster_commands(CLI::App& app, GlobalOptions& g);   // cluster status
void add_key_commands(CLI::App& app, GlobalOptions& g);       // keys create|list|revoke, portal
// deliveries resend, endpoints recover, events replay, jobs get (replay); after the
// endpoints and deliveries adders (it adds to their commands)
void add_replay_commands(CLI::App& app, GlobalOptions& g);

}  // namespace ringcast::cli
