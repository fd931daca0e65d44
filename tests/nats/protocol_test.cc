// The NATS wire format (nats/protocol.h) and the JetStream pieces (nats/jetstream.h): every op
// the server sends parsed the same however the bytes are cut into reads, payloads byte for byte
// (CRLF and binary inside), the limits and violations refused, header blocks, the encoders'
// exact bytes, and the $JS.ACK metadata and API answers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nats/jetstream.h"
#include "nats/protocol.h"

namespace ringcast::nats {
namespace {

using namespace std::chrono_literals;

// Collects every op; can stop after `stop_after` ops.
struct Collect final : OpSink {
  std::vector<Op> ops;
  std::vector<size_t> data_capacity;  // as the sink gets it (a copy would not keep it)
  size_t stop_after = SIZE_MAX;
  bool on_op(Op& op) override {
    ops.push_back(op);
    data_capacity.push_back(op.msg.data.capacity());
    return ops.size() < stop_after;
  }
};

// Feeds `bytes` in pieces of `step` (0: whole); the ops, or the failure's message.
std::vector<Op> parse(const std::string& bytes, size_t step = 0, std::string* error = nullptr,
                      ParserLimits limits = {}) {
  Parser p(limits);
  Collect c;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = step == 0 ? bytes.size() - at : std::min(step, bytes.size() - at);
    auto r = p.feed(bytes.data() + at, n, c);
    if (!r.ok()) {
      if (error) *error = r.error().message;
      EXPECT_TRUE(p.failed());
      break;
    }
    at += n;
  }
  return c.ops;
}

std::string describe(const std::vector<Op>& ops) {
  std::string s;
  for (const auto& o : ops) {
    s += std::to_string(static_cast<int>(o.kind));
    s += '|';
    s += o.text;
    s += '|';
    s += o.msg.subject;
    s += '|';
    s += std::to_string(o.msg.sid);
    s += '|';
    s += o.msg.reply;
    s += '|';
    s += o.msg.headers;
    s += '|';
    s += o.msg.data;
    s += '\n';
  }
  return s;
}

constexpr char kStreamBytes[] =
    "INFO {\"server_id\":\"X\",\"headers\":true,\"max_payload\":1048576} \r\n"
    "PING\r\n"
    "pong\r\n"
    "+OK\r\n"
    "MSG ev.a 7 5\r\nhello\r\n"
    "MSG ev.b 7 _INBOX.r.1 6\r\na\r\nb\0c\r\n"
    "MSG _INBOX.x.2 1  24\r\n{\"stream\":\"EV\", \"seq\":1}\r\n"
    "HMSG ev.h 3 $JS.ACK.EV.rc.1.4.4.17965.3 24 29\r\nNATS/1.0\r\nA: b\r\nA: c\r\n\r\nhello\r\n"
    "HMSG _INBOX.p.1 2  81 81\r\nNATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\n"
    "Nats-Pending-Bytes: 0\r\n\r\n\r\n"
    "MSG empty 9 0\r\n\r\n"
    "-ERR 'Authorization Violation'\r\n";
// With the NUL inside (a std::string made from a char* would stop at it).
const std::string kStream(kStreamBytes, sizeof kStreamBytes - 1);

TEST(NatsParser, EveryOpOfAStreamInOrderWithPayloadsByteForByte) {
  std::string error;
  auto ops = parse(kStream, 0, &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(ops.size(), 11u) << describe(ops);
  EXPECT_EQ(ops[0].kind, OpKind::kInfo);
  EXPECT_EQ(ops[0].text, "{\"server_id\":\"X\",\"headers\":true,\"max_payload\":1048576}");
  EXPECT_EQ(ops[1].kind, OpKind::kPing);
  EXPECT_EQ(ops[2].kind, OpKind::kPong);  // ops are case-insensitive
  EXPECT_EQ(ops[3].kind, OpKind::kOk);
  EXPECT_EQ(ops[4].kind, OpKind::kMsg);
  EXPECT_EQ(ops[4].msg.subject, "ev.a");
  EXPECT_EQ(ops[4].msg.sid, 7u);
  EXPECT_EQ(ops[4].msg.reply, "");
  EXPECT_EQ(ops[4].msg.data, "hello");
  EXPECT_EQ(ops[5].msg.reply, "_INBOX.r.1");
  EXPECT_EQ(ops[5].msg.data, std::string("a\r\nb\0c", 6));  // CRLF and NUL inside: kept
  EXPECT_EQ(ops[6].msg.subject, "_INBOX.x.2");              // two spaces: no reply
  EXPECT_EQ(ops[6].msg.reply, "");
  EXPECT_EQ(ops[6].msg.data, "{\"stream\":\"EV\", \"seq\":1}");
  EXPECT_EQ(ops[7].msg.reply, "$JS.ACK.EV.rc.1.4.4.17965.3");
  EXPECT_EQ(ops[7].msg.headers, "NATS/1.0\r\nA: b\r\nA: c\r\n\r\n");
  EXPECT_EQ(ops[7].msg.data, "hello");
  EXPECT_EQ(header_status(ops[8].msg.headers), 408);
  EXPECT_EQ(ops[8].msg.data, "");
  EXPECT_EQ(ops[9].msg.subject, "empty");
  EXPECT_EQ(ops[9].msg.data, "");
  EXPECT_EQ(ops[10].kind, OpKind::kErr);
  EXPECT_EQ(ops[10].text, "Authorization Violation");
}

TEST(NatsParser, APayloadHasRoomForAJsonParserPastItsEnd) {
  Parser p;
  Collect c;
  const std::string b = "MSG a 1 5\r\nhello\r\nHMSG a 1 12 14\r\nNATS/1.0\r\n\r\n{}\r\n";
  ASSERT_TRUE(p.feed(b.data(), b.size(), c).ok());
  ASSERT_EQ(c.data_capacity.size(), 2u);
  EXPECT_GE(c.data_capacity[0], 5 + kPayloadSlack);
  EXPECT_GE(c.data_capacity[1], 2 + kPayloadSlack);
}

TEST(NatsParser, TheOpsDoNotDependOnHowTheBytesAreCut) {
  const std::string& bytes = kStream;
  const std::string whole = describe(parse(bytes));
  for (size_t step = 1; step <= 40; ++step) {
    std::string error;
    EXPECT_EQ(describe(parse(bytes, step, &error)), whole) << "step " << step << " " << error;
  }
  // Every single cut point.
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    Parser p;
    Collect c;
    ASSERT_TRUE(p.feed(bytes.data(), cut, c).ok());
    ASSERT_TRUE(p.feed(bytes.data() + cut, bytes.size() - cut, c).ok());
    ASSERT_EQ(describe(c.ops), whole) << "cut at " << cut;
  }
}

TEST(NatsParser, ViolationsAndLimitsAreErrorsAndTheParserStaysFailed) {
  struct Case {
    const char* bytes;
    const char* why;
  };
  const Case cases[] = {
      {"HELLO\r\n", "unknown"},
      {"MSG a 1\r\n", "MSG needs"},
      {"MSG a x 3\r\nabc\r\n", "sid"},
      {"MSG a 1 -3\r\nabc\r\n", "size"},
      {"MSG a 1 3\r\nabcX\r\n", "CRLF"},
      {"HMSG a 1 10 5\r\nNATS/1.0\r\n\r\n\r\n", "header bytes beyond"},
      {"HMSG a 1 3 5\r\nabcde\r\n", "header block"},
      {"HMSG a 1 12 12\r\nNOTS/1.0\r\n\r\n\r\n", "header block"},
      {"MSG a 1 99999999999\r\n", "larger than the limit"},
      {"MSG a 1 2 3 4 5\r\nabcd\r\n", "MSG needs"},
      {"\r\n", "empty"},
  };
  for (const auto& c : cases) {
    std::string error;
    parse(c.bytes, 0, &error);
    EXPECT_NE(error.find(c.why), std::string::npos) << c.bytes << " -> '" << error << "'";
  }
  ParserLimits small;
  small.max_control_line = 16;
  small.max_payload = 8;
  std::string error;
  parse("INFO {\"a\":\"aaaaaaaaaaaaaaaaaa\"}\r\n", 0, &error, small);
  EXPECT_NE(error.find("control line"), std::string::npos) << error;
  error.clear();
  parse(std::string(40, 'I'), 5, &error, small);  // no newline yet, but already too long
  EXPECT_NE(error.find("control line"), std::string::npos) << error;
  error.clear();
  parse("MSG a 1 9\r\n123456789\r\n", 0, &error, small);
  EXPECT_NE(error.find("larger"), std::string::npos) << error;
  // Failed stays failed until reset().
  Parser p;
  Collect c;
  EXPECT_FALSE(p.feed("BAD\r\n", 5, c).ok());
  EXPECT_FALSE(p.feed("PING\r\n", 6, c).ok());
  EXPECT_TRUE(c.ops.empty());
  p.reset();
  EXPECT_TRUE(p.feed("PING\r\n", 6, c).ok());
  EXPECT_EQ(c.ops.size(), 1u);
}

TEST(NatsParser, ASinkThatStopsEndsTheFeedAtThatOp) {
  Parser p;
  Collect c;
  c.stop_after = 2;
  const std::string b = "PING\r\nPONG\r\nPING\r\n";
  ASSERT_TRUE(p.feed(b.data(), b.size(), c).ok());
  EXPECT_EQ(c.ops.size(), 2u);
}

TEST(NatsHeaders, StatusFieldsRepeatsAndBadBlocks) {
  auto h = parse_headers("NATS/1.0 409 Consumer Deleted\r\n\r\n");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 409);
  EXPECT_EQ(h->description, "Consumer Deleted");
  EXPECT_TRUE(h->fields.empty());
  h = parse_headers("NATS/1.0\r\nRingcast-Tenant: acme\r\nX:  two words \r\nX: again\r\n\r\n");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 0);
  ASSERT_EQ(h->fields.size(), 3u);
  EXPECT_EQ(*h->find("Ringcast-Tenant"), "acme");
  EXPECT_EQ(*h->find("X"), "two words");           // the first of a repeated key
  EXPECT_EQ(h->find("ringcast-tenant"), nullptr);  // exact names
  EXPECT_FALSE(parse_headers("HTTP/1.1 200\r\n\r\n").ok());
  EXPECT_FALSE(parse_headers("NATS/1.0\r\nno colon\r\n\r\n").ok());
  EXPECT_FALSE(parse_headers("NATS/1.0\r\nA: b\r\n").ok());  // no empty line
  EXPECT_EQ(header_status("NATS/1.0 503\r\n\r\n"), 503);
  EXPECT_EQ(header_status("NATS/1.0\r\n\r\n"), 0);
  EXPECT_EQ(header_status(""), 0);
  // Encoding: CR and LF in a value become spaces, a key that cannot be one is left out.
  EXPECT_EQ(encode_headers({{"A", "1"}, {"Bad Key", "x"}, {"M", "two\r\nlines"}}),
            "NATS/1.0\r\nA: 1\r\nM: two  lines\r\n\r\n");
  auto back = parse_headers(encode_headers({{"Ringcast-Error-Message", "a: b"}}));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back->find("Ringcast-Error-Message"), "a: b");
}

TEST(NatsEncode, TheClientOpsExactly) {
  std::string out;
  encode_pub(out, "a.b", "", "hi");
  encode_pub(out, "a.b", "_INBOX.x.1", "");
  encode_hpub(out, "a", "r", "NATS/1.0\r\n\r\n", "xyz");
  encode_sub(out, "_INBOX.x.*", "", 3);
  encode_sub(out, "q.>", "workers", 4);
  encode_unsub(out, 4);
  EXPECT_EQ(out,
            "PUB a.b 2\r\nhi\r\n"
            "PUB a.b _INBOX.x.1 0\r\n\r\n"
            "HPUB a r 12 15\r\nNATS/1.0\r\n\r\nxyz\r\n"
            "SUB _INBOX.x.* 3\r\n"
            "SUB q.> workers 4\r\n"
            "UNSUB 4\r\n");
  out.clear();
  // Aggregate-initialised: assigning a one-letter literal trips GCC 12's false -Wrestrict.
  const ConnectFields f{"ringcast \"x\"", "0.1.0", "", "u", "p\\w", false};
  encode_connect(out, f);
  EXPECT_EQ(out,
            "CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":false,\"name\":"
            "\"ringcast \\\"x\\\"\",\"lang\":\"cpp\",\"version\":\"0.1.0\",\"protocol\":1,"
            "\"echo\":true,\"headers\":true,\"no_responders\":true,\"user\":\"u\",\"pass\":"
            "\"p\\\\w\"}\r\n");
}

TEST(NatsEncode, Subjects) {
  for (const char* ok : {"a", "a.b.c", "$JS.API.INFO", "_INBOX.abc.1"}) {
    EXPECT_TRUE(valid_subject(ok)) << ok;
  }
  for (const char* bad : {"", "a..b", ".a", "a.", "a b", "a\tb", "a.*", "a.>", "\x7f"}) {
    EXPECT_FALSE(valid_subject(bad)) << bad;
  }
  EXPECT_TRUE(valid_subject("a.*.c", true));
  EXPECT_TRUE(valid_subject("a.>", true));
  EXPECT_FALSE(valid_subject("a.>.c", true));
}

TEST(JetStream, AckSubjectsOfBothForms) {
  auto m = parse_ack_subject("$JS.ACK.EV.rc.3.5.16.1796526693873845438.7");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->stream, "EV");
  EXPECT_EQ(m->consumer, "rc");
  EXPECT_EQ(m->delivered, 3u);
  EXPECT_EQ(m->stream_seq, 5u);
  EXPECT_EQ(m->consumer_seq, 16u);
  EXPECT_EQ(m->timestamp_ns, 1796526693873845438);
  EXPECT_EQ(m->pending, 7u);
  m = parse_ack_subject("$JS.ACK.hub.ACCHASH.EV.rc.1.9.10.1796526693873845438.0.r4nd0m");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->stream, "EV");
  EXPECT_EQ(m->stream_seq, 9u);
  EXPECT_EQ(m->pending, 0u);
  for (const char* bad : {"", "_INBOX.x.1", "$JS.ACK.EV.rc.1.2.3", "$JS.ACK.EV.rc.x.2.3.4.5",
                          "$JS.NAK.EV.rc.1.2.3.4.5", "$JS.ACK.EV.rc.1.2.3.4.5.6.7.8.9.10.11"}) {
    EXPECT_FALSE(parse_ack_subject(bad).has_value()) << bad;
  }
}

TEST(JetStream, RequestsAndAnswers) {
  EXPECT_EQ(consumer_create_subject("EV", "ringcast"),
            "$JS.API.CONSUMER.DURABLE.CREATE.EV.ringcast");
  EXPECT_EQ(pull_subject("EV", "rc"), "$JS.API.CONSUMER.MSG.NEXT.EV.rc");
  EXPECT_EQ(consumer_info_subject("EV", "rc"), "$JS.API.CONSUMER.INFO.EV.rc");
  EXPECT_EQ(pull_body(256, 1500ms), "{\"batch\":256,\"expires\":1500000000}");
  EXPECT_EQ(nak_body(500ms), "-NAK {\"delay\":500000000}");
  ConsumerConfig c;
  c.durable = "rc";
  c.filter_subject = "ev.>";
  c.max_ack_pending = 1000;
  c.ack_wait = 2s;
  EXPECT_EQ(consumer_create_body("EV", c),
            "{\"stream_name\":\"EV\",\"config\":{\"durable_name\":\"rc\",\"deliver_policy\":"
            "\"all\",\"ack_policy\":\"explicit\",\"ack_wait\":2000000000,\"max_deliver\":-1,"
            "\"filter_subject\":\"ev.>\",\"replay_policy\":\"instant\",\"max_ack_pending\":1000}}");
  ApiReply a = parse_api_reply("{\"stream\":\"DLQ\", \"seq\":42}");
  EXPECT_TRUE(a.json);
  EXPECT_FALSE(a.error);
  EXPECT_EQ(a.stream, "DLQ");
  EXPECT_EQ(a.seq, 42u);
  a = parse_api_reply("{\"stream\":\"DLQ\",\"seq\":42,\"duplicate\":true}");
  EXPECT_TRUE(a.duplicate);
  a = parse_api_reply(
      "{\"type\":\"io.nats.jetstream.api.v1.consumer_info_response\",\"error\":{\"code\":404,"
      "\"err_code\":10014,\"description\":\"consumer not found\"}}");
  EXPECT_TRUE(a.error);
  EXPECT_EQ(a.code, 404);
  EXPECT_EQ(a.err_code, kErrConsumerNotFound);
  EXPECT_EQ(a.description, "consumer not found");
  a = parse_api_reply("{\"num_ack_pending\":6,\"num_redelivered\":2,\"num_pending\":100}");
  EXPECT_EQ(a.num_pending, 100);
  EXPECT_EQ(a.num_ack_pending, 6);
  EXPECT_EQ(a.num_redelivered, 2);
  EXPECT_FALSE(parse_api_reply("not json").json);
  EXPECT_FALSE(parse_api_reply("").json);
}

TEST(JetStream, AStoredMessageReadBack) {
  EXPECT_EQ(msg_get_subject("EV"), "$JS.API.STREAM.MSG.GET.EV");
  EXPECT_EQ(msg_get_body(42), "{\"seq\":42}");
  bool gone = true;
  // As nats-server 2.9 answers it: headers and data base64-encoded.
  auto m = parse_stored_msg(
      "{\"type\":\"io.nats.jetstream.api.v1.stream_msg_get_response\",\"message\":{\"subject\":"
      "\"ev.a\",\"seq\":1,\"hdrs\":\"TkFUUy8xLjANCkE6IGINCg0K\",\"data\":\"aGVsbG8=\",\"time\":"
      "\"2026-12-06T03:11:05.630889334Z\"}}",
      &gone);
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(gone);
  EXPECT_EQ(m->subject, "ev.a");
  EXPECT_EQ(m->headers, "NATS/1.0\r\nA: b\r\n\r\n");
  EXPECT_EQ(m->data, "hello");
  EXPECT_GE(m->data.capacity(), 5 + kPayloadSlack);
  m = parse_stored_msg("{\"message\":{\"subject\":\"x\",\"seq\":2}}", &gone);  // empty body
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->data, "");
  EXPECT_FALSE(parse_stored_msg("{\"error\":{\"code\":404,\"err_code\":10037,\"description\":"
                                "\"no message found\"}}",
                                &gone)
                   .has_value());
  EXPECT_TRUE(gone);
  EXPECT_FALSE(parse_stored_msg("{\"error\":{\"code\":503}}", &gone).has_value());
  EXPECT_FALSE(gone);
  EXPECT_FALSE(parse_stored_msg("{\"message\":{\"data\":\"%%%\"}}", &gone).has_value());
  EXPECT_FALSE(parse_stored_msg("nope", &gone).has_value());
}

}  // namespace
}  // namespace ringcast::nats
