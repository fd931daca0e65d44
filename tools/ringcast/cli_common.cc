#include "tools/ringcast/cli_common.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "engine/config.h"

namespace ringcast::cli {

void add_global_options(CLI::App& app, GlobalOptions& g) {
  app.add_option("--config", g.config_path, "TOML config file (also RINGCAST_CONFIG)")
      ->envname("RINGCAST_CONFIG");
  app.add_option("--server", g.server,
                 "daemon address host:port (default: the config's server.listen; also "
                 "RINGCAST_SERVER)")
      ->envname("RINGCAST_SERVER");
  app.add_option("--token", g.token,
                 "API token (default: the config's server.api_token / RINGCAST_API_TOKEN; also "
                 "RINGCAST_TOKEN)")
      ->envname("RINGCAST_TOKEN");
  app.add_option("--cacert", g.ca_file,
                 "PEM file of CAs trusted for an https:// --server, besides the system's (also "
                 "RINGCAST_CA_FILE)")
      ->envname("RINGCAST_CA_FILE");
  app.add_flag("--json", g.json, "print JSON instead of tables");
}

Target resolve_target(const GlobalOptions& g) {
  Target t;
  Config cfg;
  bool have_cfg = false;
  try {
    cfg = load_config(g.config_path, process_environment());
    have_cfg = true;
  } catch (const ConfigError& e) {
    // Only fatal when the config is actually needed for what the flags do not give.
    if (!g.config_path.empty() && (g.server.empty() || g.token.empty())) {
      throw CliError(std::string("config: ") + e.what());
    }
  }
  std::string server = g.server;
  if (server.empty()) {
    if (!have_cfg) cfg = Config();
    const IpAddress& ip = cfg.server.listen_ip;
    bool any = ip.is_v4() ? ip == IpAddress::v4(0, 0, 0, 0) : ip == IpAddress::v6({});
    std::string host = any ? (ip.is_v4() ? "127.0.0.1" : "::1") : to_string(ip);
    uint16_t port = cfg.server.listen_port;
    if (port == 0) {
      throw CliError("the config listens on port 0 (any free port): give --server host:port");
    }
    server = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
             std::to_string(port);
    // A TLS listener (SPEC R14): https, and the daemon's own certificate is trusted as it is.
    if (!cfg.server.tls_cert.empty()) {
      server = "https://" + server;
      t.trust.pinned_cert = cfg.server.tls_cert;
    }
  }
  t.trust.ca_file = g.ca_file;
  std::string error;
  auto addr = parse_server(server, &error);
  if (!addr) throw CliError("--server: " + error);
  t.server = *addr;
  t.token = !g.token.empty() ? g.token : (have_cfg ? cfg.server.api_token : "");
  return t;
}

std::unique_ptr<HttpClient> make_client(const GlobalOptions& g) {
  Target t = resolve_target(g);
  return std::make_unique<HttpClient>(t.server, t.token, std::chrono::seconds(60), t.trust);
}

JsonReply call_json(HttpClient& client, simdjson::dom::parser& parser, std::string_view method,
                    std::string_view target, std::string_view body) {
  HttpOutcome out = client.request(method, target, body);
  if (!out.ok) throw CliError(out.error);
  JsonReply r;
  r.status = out.reply.status;
  r.body = std::move(out.reply.body);
  simdjson::dom::element root;
  bool parsed = !parser.parse(r.body).get(root);
  if (r.status < 200 || r.status >= 300) {
    std::string msg = "server answered " + std::to_string(r.status);
    simdjson::dom::element err;
    if (parsed && !root["error"].get(err)) {
      msg += " " + jstr(err, "code") + ": " + jstr(err, "message");
      std::string field = jstr(err, "field");
      if (!field.empty()) msg += " (field: " + field + ")";
    } else if (!r.body.empty()) {
      msg += ": " + clip(r.body, 300);
    }
    if (r.status == 401) msg += "\nhint: pass --token or set RINGCAST_API_TOKEN";
    throw CliError(msg);
  }
  if (r.status == 204) return r;  // no content (a revoke): nothing to parse
  if (!parsed) throw CliError("the server's answer is not JSON: " + clip(r.body, 300));
  r.root = root;
  return r;
}

void add_tenant_option(CLI::App* sub, std::string& tenant) {
  sub->add_option("--tenant,-t", tenant, "tenant (also RINGCAST_TENANT)")
      ->envname("RINGCAST_TENANT")
      ->required();
}

std::string url_escape(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == ':' || c == '@' ||
        c == '+') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string jstr(simdjson::dom::element el, std::string_view key) {
  std::string_view s;
  if (el[key].get(s)) return "";
  return std::string(s);
}

int64_t jint(simdjson::dom::element el, std::string_view key) {
  int64_t v = 0;
  if (!el[key].get(v)) return v;
  uint64_t u = 0;
  if (!el[key].get(u)) return static_cast<int64_t>(u);
  return 0;
}

double jnum(simdjson::dom::element el, std::string_view key) {
  double d = 0;
  if (!el[key].get(d)) return d;
  return static_cast<double>(jint(el, key));
}

bool jbool(simdjson::dom::element el, std::string_view key) {
  bool b = false;
  if (el[key].get(b)) return false;
  return b;
}

std::string jtext(simdjson::dom::element el, std::string_view key) {
  simdjson::dom::element v;
  if (el[key].get(v)) return "-";
  if (v.is_null()) return "-";
  std::string_view s;
  if (!v.get(s)) return std::string(s);
  return simdjson::minify(v);
}

std::string clip(std::string_view s, size_t max) {
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    bool lead = (c & 0xC0) != 0x80;
    if (lead && chars == max) {
      out += "…";
      return out;
    }
    if (lead) chars++;
    out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : static_cast<char>(c);
  }
  return out;
}

namespace {
size_t display_width(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
}  // namespace

void Table::print(std::string_view if_empty) const {
  if (empty()) {
    std::printf("%.*s\n", static_cast<int>(if_empty.size()), if_empty.data());
  } else {
    std::fputs(str().c_str(), stdout);
  }
}

std::string Table::str() const {
  std::vector<size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], display_width(row[i]));
    }
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  std::string out;
  auto line = [&](const std::vector<std::string>& row) {
    std::string l;
    for (size_t i = 0; i < width.size(); ++i) {
      std::string cell = i < row.size() ? row[i] : "";
      l += cell;
      if (i + 1 < width.size()) l.append(width[i] - display_width(cell) + 2, ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header_);
  for (const auto& r : rows_) line(r);
  return out;
}

void print_json(const std::string& body) {
  std::fwrite(body.data(), 1, body.size(), stdout);
  if (body.empty() || body.back() != '\n') std::fputc('\n', stdout);
}

}  // namespace ringcast::cli
