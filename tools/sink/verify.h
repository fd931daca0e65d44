// Signature checks of ringcast-sink (SPEC R11): Standard Webhooks, xhub and smengo profiles,
// HMAC-SHA256 with BoringSSL, constant-time comparison, every configured secret tried.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tools/sink/http.h"
#include "tools/sink/options.h"

namespace ringcast::sink {

class Verifier {
 public:
  Verifier(VerifyMode mode, std::vector<std::string> secrets, int64_t tolerance_s);

  bool enabled() const { return mode_ != VerifyMode::kNone; }
  // True if the request passes; otherwise *reason says why ("no signature", "mismatch", ...).
  bool verify(const Request& req, std::string_view body, int64_t now_unix_s,
              const char** reason) const;

 private:
  bool standard(const Request& req, std::string_view body, int64_t now, const char** reason) const;
  bool xhub(const Request& req, std::string_view body, int64_t now, const char** reason) const;
  bool timestamp_ok(std::string_view ts, int64_t now) const;

  VerifyMode mode_;
  std::vector<std::string> secrets_;
  int64_t tolerance_s_;
};

// "<id>:<attempt>" (SPEC R5.4); false if malformed.
bool split_smengo_id(std::string_view value, std::string_view* id, uint32_t* attempt);

}  // namespace ringcast::sink
