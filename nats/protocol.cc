#include "nats/protocol.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace ringcast::nats {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t';
}

// Splits `line` at runs of spaces and tabs (a server writes "MSG s 1  24" for an empty reply).
size_t split(std::string_view line, std::string_view* out, size_t max) {
  size_t n = 0;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    if (i == line.size()) break;
    size_t j = i;
    while (j < line.size() && !is_space(line[j])) ++j;
    if (n == max) return max + 1;  // too many
    out[n++] = line.substr(i, j - i);
    i = j;
  }
  return n;
}

bool parse_u64(std::string_view s, uint64_t& v) {
  if (s.empty() || s.size() > 19) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size();
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    if (x >= 'a' && x <= 'z') x = static_cast<char>(x - 'a' + 'A');
    if (x != b[i]) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (is_space(s.front()) || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (is_space(s.back()) || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

void append_u64(std::string& out, uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  out.append(buf, end);
}

}  // namespace

Error Parser::fail(const char* message) {
  failed_ = true;
  error_ = message;
  return make_error(Errc::kCorruption, message, nullptr, kProtocol);
}

void Parser::reset() {
  line_.clear();
  in_payload_ = false;
  has_headers_ = false;
  header_bytes_ = total_bytes_ = got_ = 0;
  op_ = Op{};
  failed_ = false;
  error_ = nullptr;
}

Result<void> Parser::feed(const char* data, size_t n, OpSink& sink) {
  if (failed_) return make_error(Errc::kCorruption, error_, nullptr, kProtocol);
  const char* p = data;
  const char* const end = data + n;
  while (p < end) {
    if (in_payload_) {
      const Step s = payload(p, end, sink);
      if (s == Step::kError) return make_error(Errc::kCorruption, error_, nullptr, kProtocol);
      if (s == Step::kStop) return ok();
      continue;
    }
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (nl == nullptr) {
      if (line_.size() + static_cast<size_t>(end - p) > limits_.max_control_line)
        return fail("nats: a control line longer than the limit");
      line_.append(p, end);
      return ok();
    }
    std::string_view line;
    if (line_.empty()) {
      line = std::string_view(p, static_cast<size_t>(nl - p));
    } else {
      line_.append(p, nl);
      line = line_;
    }
    if (line.size() > limits_.max_control_line)
      return fail("nats: a control line longer than the limit");
    p = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const Step s = control_line(line, sink);
    line_.clear();
    if (s == Step::kError) return make_error(Errc::kCorruption, error_, nullptr, kProtocol);
    if (s == Step::kStop) return ok();
  }
  return ok();
}

Parser::Step Parser::control_line(std::string_view line, OpSink& sink) {
  std::string_view t[6];
  const size_t n = split(line, t, 6);
  if (n == 0) {
    fail("nats: an empty control line");
    return Step::kError;
  }
  const std::string_view name = t[0];
  auto emit = [&](OpKind k, std::string_view text) {
    op_.kind = k;
    op_.text.assign(text);
    return sink.on_op(op_) ? Step::kDone : Step::kStop;
  };
  if (iequals(name, "MSG") || iequals(name, "HMSG")) {
    const bool h = name.size() == 4;
    const size_t want = h ? 5 : 4;  // subject sid [reply] [hdr] total
    if (n != want && n != want + 1) {
      fail(h ? "nats: HMSG needs subject, sid, [reply,] header and total sizes"
             : "nats: MSG needs subject, sid, [reply,] size");
      return Step::kError;
    }
    uint64_t sid = 0, hdr = 0, total = 0;
    const bool with_reply = n == want + 1;
    if (!parse_u64(t[2], sid)) {
      fail("nats: a bad sid");
      return Step::kError;
    }
    if (!parse_u64(t[n - 1], total) || (h && !parse_u64(t[n - 2], hdr))) {
      fail("nats: a bad size");
      return Step::kError;
    }
    if (hdr > total || total > limits_.max_payload) {
      fail(hdr > total ? "nats: header bytes beyond the message's size"
                       : "nats: a message larger than the limit");
      return Step::kError;
    }
    if (h && hdr < 10) {  // "NATS/1.0\r\n" at least
      fail("nats: an HMSG without a header block");
      return Step::kError;
    }
    op_.kind = OpKind::kMsg;
    op_.text.clear();
    Msg& m = op_.msg;
    m.subject.assign(t[1]);
    m.sid = sid;
    if (with_reply) {
      m.reply.assign(t[3]);
    } else {
      m.reply.clear();
    }
    m.headers.clear();
    m.headers.reserve(hdr);
    m.data.clear();
    m.data.reserve(total - hdr + kPayloadSlack);
    has_headers_ = h;
    header_bytes_ = hdr;
    total_bytes_ = total;
    got_ = 0;
    in_payload_ = true;
    return Step::kDone;
  }
  if (iequals(name, "PING")) return emit(OpKind::kPing, {});
  if (iequals(name, "PONG")) return emit(OpKind::kPong, {});
  if (iequals(name, "+OK")) return emit(OpKind::kOk, {});
  if (iequals(name, "-ERR")) {
    std::string_view rest = trim(line.substr(static_cast<size_t>(name.data() - line.data()) + 4));
    if (rest.size() >= 2 && rest.front() == '\'' && rest.back() == '\'')
      rest = rest.substr(1, rest.size() - 2);
    return emit(OpKind::kErr, rest);
  }
  if (iequals(name, "INFO")) {
    return emit(OpKind::kInfo,
                trim(line.substr(static_cast<size_t>(name.data() - line.data()) + 4)));
  }
  fail("nats: an unknown operation from the server");
  return Step::kError;
}

Parser::Step Parser::payload(const char*& p, const char* end, OpSink& sink) {
  Msg& m = op_.msg;
  const size_t need = total_bytes_ + 2 - got_;
  const size_t take = std::min(need, static_cast<size_t>(end - p));
  size_t pos = got_;
  const char* q = p;
  size_t left = take;
  if (left > 0 && pos < header_bytes_) {
    const size_t k = std::min(left, header_bytes_ - pos);
    m.headers.append(q, k);
    pos += k;
    q += k;
    left -= k;
  }
  if (left > 0 && pos < total_bytes_) {
    const size_t k = std::min(left, total_bytes_ - pos);
    m.data.append(q, k);
    pos += k;
    q += k;
    left -= k;
  }
  for (; left > 0; --left, ++q, ++pos) {
    if (*q != (pos == total_bytes_ ? '\r' : '\n')) {
      fail("nats: a message not followed by CRLF");
      return Step::kError;
    }
  }
  got_ = pos;
  p += take;
  if (got_ < total_bytes_ + 2) return Step::kDone;
  in_payload_ = false;
  if (has_headers_) {
    const std::string_view hb = m.headers;
    if (hb.substr(0, 5) != "NATS/" || hb.size() < 4 || hb.substr(hb.size() - 4) != "\r\n\r\n") {
      fail("nats: a header block that is not NATS/1.0 lines ending in an empty line");
      return Step::kError;
    }
  }
  return sink.on_op(op_) ? Step::kDone : Step::kStop;
}

// --- headers ------------------------------------------------------------------------------------

const std::string* Headers::find(std::string_view key) const {
  for (const auto& [k, v] : fields)
    if (k == key) return &v;
  return nullptr;
}

Result<Headers> parse_headers(std::string_view block) {
  auto bad = [](const char* m) {
    return make_error(Errc::kInvalidArgument, m, nullptr, kProtocol);
  };
  if (block.substr(0, 5) != "NATS/") return bad("nats: a header block must start with NATS/1.0");
  Headers h;
  size_t eol = block.find("\r\n");
  if (eol == std::string_view::npos) return bad("nats: a header block without CRLF");
  std::string_view first = block.substr(0, eol);
  const size_t sp = first.find(' ');
  if (sp != std::string_view::npos) {
    std::string_view rest = trim(first.substr(sp + 1));
    size_t i = 0;
    int code = 0;
    while (i < rest.size() && i < 3 && rest[i] >= '0' && rest[i] <= '9')
      code = code * 10 + (rest[i++] - '0');
    if (i == 3) {
      h.status = code;
      h.description.assign(trim(rest.substr(3)));
    }
  }
  size_t at = eol + 2;
  for (;;) {
    eol = block.find("\r\n", at);
    if (eol == std::string_view::npos)
      return bad("nats: a header block not ended by an empty line");
    std::string_view line = block.substr(at, eol - at);
    at = eol + 2;
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return bad("nats: a header line without a key");
    h.fields.emplace_back(std::string(trim(line.substr(0, colon))),
                          std::string(trim(line.substr(colon + 1))));
  }
  return h;
}

int header_status(std::string_view block) {
  if (block.size() < 12 || block.substr(0, 9) != "NATS/1.0 ") return 0;
  int code = 0;
  for (size_t i = 9; i < 12; ++i) {
    if (block[i] < '0' || block[i] > '9') return 0;
    code = code * 10 + (block[i] - '0');
  }
  return code;
}

std::string encode_headers(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out = "NATS/1.0\r\n";
  for (const auto& [k, v] : fields) {
    if (k.empty() || k.find_first_of("\r\n: ") != std::string::npos) continue;
    out += k;
    out += ": ";
    const size_t at = out.size();
    out += v;
    std::replace_if(
        out.begin() + static_cast<std::ptrdiff_t>(at), out.end(),
        [](char c) { return c == '\r' || c == '\n'; }, ' ');
    out += "\r\n";
  }
  out += "\r\n";
  return out;
}

// --- client side
// ----------------------------------------------------------------------------------

bool valid_subject(std::string_view s, bool wildcards) {
  if (s.empty() || s.size() > 1024) return false;
  // One pass: each token non-empty printable ASCII; "*" and a final ">" only with wildcards.
  size_t tok_start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s[i] != '.') {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c <= 0x20 || c >= 0x7f) return false;
      continue;
    }
    const size_t len = i - tok_start;
    if (len == 0) return false;
    if (len == 1 && (s[tok_start] == '*' || s[tok_start] == '>')) {
      if (!wildcards) return false;
      if (s[tok_start] == '>' && i != s.size()) return false;  // '>' only last
    }
    tok_start = i + 1;
  }
  return true;
}

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      static const char* kHex = "0123456789abcdef";
      out += "\\u00";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
}

void encode_connect(std::string& out, const ConnectFields& f) {
  out += "CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":";
  out += f.tls_required ? "true" : "false";
  out += ",\"name\":";
  append_json_string(out, f.name);
  out += ",\"lang\":\"cpp\",\"version\":";
  append_json_string(out, f.version);
  out += ",\"protocol\":1,\"echo\":true,\"headers\":true,\"no_responders\":true";
  if (!f.token.empty()) {
    out += ",\"auth_token\":";
    append_json_string(out, f.token);
  }
  if (!f.user.empty()) {
    out += ",\"user\":";
    append_json_string(out, f.user);
    out += ",\"pass\":";
    append_json_string(out, f.pass);
  }
  if (!f.nkey.empty()) {
    out += ",\"nkey\":";
    append_json_string(out, f.nkey);
    out += ",\"sig\":";
    append_json_string(out, f.sig);
  }
  out += "}\r\n";
}

void encode_pub(std::string& out, std::string_view subject, std::string_view reply,
                std::string_view data) {
  out += "PUB ";
  out += subject;
  out.push_back(' ');
  if (!reply.empty()) {
    out += reply;
    out.push_back(' ');
  }
  append_u64(out, data.size());
  out += "\r\n";
  out += data;
  out += "\r\n";
}

void encode_hpub(std::string& out, std::string_view subject, std::string_view reply,
                 std::string_view headers, std::string_view data) {
  out += "HPUB ";
  out += subject;
  out.push_back(' ');
  if (!reply.empty()) {
    out += reply;
    out.push_back(' ');
  }
  append_u64(out, headers.size());
  out.push_back(' ');
  append_u64(out, headers.size() + data.size());
  out += "\r\n";
  out += headers;
  out += data;
  out += "\r\n";
}

void encode_sub(std::string& out, std::string_view subject, std::string_view queue, uint64_t sid) {
  out += "SUB ";
  out += subject;
  out.push_back(' ');
  if (!queue.empty()) {
    out += queue;
    out.push_back(' ');
  }
  append_u64(out, sid);
  out += "\r\n";
}

void encode_unsub(std::string& out, uint64_t sid) {
  out += "UNSUB ";
  append_u64(out, sid);
  out += "\r\n";
}

}  // namespace ringcast::nats
