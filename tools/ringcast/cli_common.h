// What every client subcommand shares: global flags (--config, --server, --token, --json), the
// server/token they resolve to, JSON reading of answers, human tables and error reporting.
// Invariant: a subcommand reports failure only through CliError (message + exit code), so
// main() prints it once and exits non-zero.
#pragma once

#include <simdjson.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tools/ringcast/cli_http.h"

namespace CLI {
class App;
}

namespace ringcast::cli {

// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;       // bad input, unreachable server, an error answer
inline constexpr int kExitSomeFailed = 2;  // `send`: some events were rejected

class CliError : public std::runtime_error {
 public:
  explicit CliError(const std::string& message, int code = kExitError)
      : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

struct GlobalOptions {
  std::string config_path;  // --config / RINGCAST_CONFIG
  std::string server;       // --server / RINGCAST_SERVER
  std::string token;        // --token / RINGCAST_TOKEN
  std::string ca_file;      // --cacert / RINGCAST_CA_FILE: trusted for an https:// server
  bool json = false;        // --json
  int exit_code = kExitOk;  // set by the subcommand that ran
};

// Adds --config, --server, --token, --json to `app` (subcommands inherit them).
void add_global_options(CLI::App& app, GlobalOptions& g);

// The server address and token a client command uses: flags first, then the config file (its
// listen address, with 0.0.0.0 / :: turned into loopback, over https when it sets
// server.tls_cert, whose certificate is then trusted as it is; and its api_token, which already
// honours RINGCAST_API_TOKEN). Throws CliError.
struct Target {
  ServerAddress server;
  std::string token;
  TlsTrust trust;
};
Target resolve_target(const GlobalOptions& g);
std::unique_ptr<HttpClient> make_client(const GlobalOptions& g);

// Sends a request; returns the parsed JSON body of a 2xx answer. Any other answer or a transport
// failure throws CliError with the server's error code, message and field.
struct JsonReply {
  int status = 0;
  std::string body;
  simdjson::dom::element root;
};
JsonReply call_json(HttpClient& client, simdjson::dom::parser& parser, std::string_view method,
                    std::string_view target, std::string_view body = {});

// The required `-t/--tenant` option of a subcommand (also RINGCAST_TENANT).
void add_tenant_option(CLI::App* sub, std::string& tenant);

// Path segment / query value escaping for URLs the CLI builds.
std::string url_escape(std::string_view s);

// JSON field access that never throws: "" / 0 / false when missing or of another type.
std::string jstr(simdjson::dom::element el, std::string_view key);
int64_t jint(simdjson::dom::element el, std::string_view key);
double jnum(simdjson::dom::element el, std::string_view key);
bool jbool(simdjson::dom::element el, std::string_view key);
// Any JSON value as display text: strings unquoted, null → "-", others minified JSON.
std::string jtext(simdjson::dom::element el, std::string_view key);

// A column-aligned text table for humans.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str() const;
  bool empty() const { return rows_.empty(); }
  // Prints the table to stdout, or `if_empty` and a newline when it has no rows.
  void print(std::string_view if_empty) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Truncates to `max` display characters with an ellipsis; newlines become spaces.
std::string clip(std::string_view s, size_t max);

// Prints the body as the --json output (the server's JSON, one line, newline-terminated).
void print_json(const std::string& body);

}  // namespace ringcast::cli
