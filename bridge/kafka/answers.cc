#include "bridge/kafka/answers.h"

#include <simdjson.h>

namespace ringcast::kafka_bridge {
namespace {

// {"error":{"code","message"}} of an error answer; empty strings when it is not that shape.
void read_error(simdjson::dom::element el, std::string& code, std::string& message) {
  simdjson::dom::element err;
  if (el["error"].get(err)) return;
  std::string_view s;
  if (!err["code"].get(s)) code = std::string(s);
  if (!err["message"].get(s)) message = std::string(s);
}

std::string describe(int status, const std::string& code, const std::string& message) {
  std::string d = std::to_string(status);
  if (!code.empty()) {
    d += ' ';
    d += code;
  }
  if (!message.empty()) {
    d += ": ";
    d += message;
  }
  return d;
}

// A code for a refusal whose answer named none ("http_400").
std::string status_code_name(int status) {
  std::string c = "http_";
  c += std::to_string(status);
  return c;
}

}  // namespace

Outcome outcome_for(int status, const std::string& code) {
  if (status == 202) return Outcome::kAccepted;
  if (status == 200) return Outcome::kDuplicate;
  // 404 is the record's fault only when it names the record's tenant; another 404 (a wrong URL
  // prefix, say) is the bridge's configuration and must not dead-letter every record.
  if (status == 404) return code == "unknown_tenant" ? Outcome::kPermanent : Outcome::kTransient;
  if (status == 400 || status == 409 || status == 413 || status == 422) return Outcome::kPermanent;
  return Outcome::kTransient;
}

BulkVerdict read_bulk_answer(const HttpAnswer& a, size_t lines) {
  BulkVerdict v;
  if (a.status == 0) {
    v.reason = a.error;
    return v;
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  const bool json_ok = !parser.parse(a.body).get(doc);
  if (a.status != 200) {
    std::string code, message;
    if (json_ok) read_error(doc, code, message);
    v.kind = a.status == 413 ? BulkVerdict::Kind::kTooLarge : BulkVerdict::Kind::kTransient;
    v.reason = describe(a.status, code, message);
    return v;
  }
  simdjson::dom::array results;
  if (!json_ok || doc["results"].get(results)) {
    v.reason = "the bulk answer has no results array";
    return v;
  }
  v.kind = BulkVerdict::Kind::kLines;
  v.lines.assign(
      lines, LineResult{Outcome::kTransient, 0, "", "the bulk answer has no result for this line"});
  for (simdjson::dom::element item : results) {
    uint64_t line = 0;
    int64_t status = 0;
    if (item["line"].get(line) || item["status"].get(status)) continue;
    if (line < 1 || line > lines) continue;
    LineResult& r = v.lines[line - 1];
    r.status = static_cast<int>(status);
    r.code.clear();
    r.message.clear();
    read_error(item, r.code, r.message);
    r.outcome = outcome_for(r.status, r.code);
    if (r.outcome == Outcome::kPermanent && r.code.empty()) r.code = status_code_name(r.status);
  }
  return v;
}

LineResult read_single_answer(const HttpAnswer& a) {
  LineResult r;
  r.status = a.status;
  if (a.status == 0) {
    r.message = a.error;
    return r;
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (!parser.parse(a.body).get(doc)) read_error(doc, r.code, r.message);
  r.outcome = outcome_for(a.status, r.code);
  if (r.outcome == Outcome::kPermanent && r.code.empty()) r.code = status_code_name(a.status);
  return r;
}

}  // namespace ringcast::kafka_bridge
