// What the daemon's answers mean for the records the bridge sent (bridge/kafka/answers.h): done,
// dead-lettered, or sent again — and only an answer that names a line's status settles that line.
#include "bridge/kafka/answers.h"

#include <gtest/gtest.h>

#include <string>

namespace ringcast::kafka_bridge {
namespace {

TEST(KafkaBridgeAnswers, StatusesSortIntoDonePermanentAndTransient) {
  struct Row {
    int status;
    const char* code;
    Outcome outcome;
  };
  for (const Row& r :
       {Row{202, "", Outcome::kAccepted}, Row{200, "", Outcome::kDuplicate},
        Row{400, "invalid_json", Outcome::kPermanent}, Row{409, "conflict", Outcome::kPermanent},
        Row{413, "body_too_large", Outcome::kPermanent},
        Row{422, "invalid_value", Outcome::kPermanent},
        Row{404, "unknown_tenant", Outcome::kPermanent},
        Row{404, "not_found", Outcome::kTransient},  // a wrong URL prefix
        Row{401, "unauthorized", Outcome::kTransient}, Row{403, "forbidden", Outcome::kTransient},
        Row{429, "", Outcome::kTransient}, Row{500, "internal", Outcome::kTransient},
        Row{503, "shutting_down", Outcome::kTransient}, Row{0, "", Outcome::kTransient},
        Row{302, "", Outcome::kTransient}}) {
    EXPECT_EQ(outcome_for(r.status, r.code), r.outcome) << r.status << " " << r.code;
  }
}

TEST(KafkaBridgeAnswers, EachBulkLineGetsItsOwnResult) {
  HttpAnswer a;
  a.status = 200;
  a.body =
      "{\"lines\":5,\"accepted\":1,\"duplicates\":1,\"conflicts\":1,\"errors\":1,\"results\":["
      "{\"line\":1,\"event_id\":\"a\",\"message_id\":\"msg_1\",\"status\":202,\"deliveries\":1},"
      "{\"line\":2,\"event_id\":\"b\",\"message_id\":\"msg_2\",\"status\":200,\"deliveries\":1},"
      "{\"line\":3,\"event_id\":\"c\",\"status\":409,\"error\":{\"code\":\"conflict\","
      "\"message\":\"an event with this id was accepted with another payload\",\"field\":\"id\"}},"
      "{\"line\":5,\"event_id\":\"e\",\"status\":503,\"error\":{\"code\":\"shutting_down\","
      "\"message\":\"bye\"}}]}";
  BulkVerdict v = read_bulk_answer(a, 5);
  ASSERT_EQ(v.kind, BulkVerdict::Kind::kLines);
  ASSERT_EQ(v.lines.size(), 5u);
  EXPECT_EQ(v.lines[0].outcome, Outcome::kAccepted);
  EXPECT_EQ(v.lines[1].outcome, Outcome::kDuplicate);
  EXPECT_EQ(v.lines[2].outcome, Outcome::kPermanent);
  EXPECT_EQ(v.lines[2].code, "conflict");
  EXPECT_EQ(v.lines[2].message, "an event with this id was accepted with another payload");
  EXPECT_EQ(v.lines[3].outcome, Outcome::kTransient);  // no result for line 4: sent again
  EXPECT_EQ(v.lines[4].outcome, Outcome::kTransient);
  EXPECT_EQ(v.lines[4].code, "shutting_down");
}

TEST(KafkaBridgeAnswers, AWholeRequestRefusalSettlesNoLine) {
  HttpAnswer none{0, "connection refused", ""};
  EXPECT_EQ(read_bulk_answer(none, 3).kind, BulkVerdict::Kind::kTransient);
  EXPECT_EQ(read_bulk_answer(none, 3).reason, "connection refused");
  HttpAnswer busy{503, "", "{\"error\":{\"code\":\"shutting_down\",\"message\":\"stopping\"}}"};
  BulkVerdict v = read_bulk_answer(busy, 3);
  EXPECT_EQ(v.kind, BulkVerdict::Kind::kTransient);
  EXPECT_NE(v.reason.find("shutting_down"), std::string::npos);
  HttpAnswer big{413, "", "{\"error\":{\"code\":\"too_many_events\",\"message\":\"...\"}}"};
  EXPECT_EQ(read_bulk_answer(big, 3).kind, BulkVerdict::Kind::kTooLarge);
  HttpAnswer unauthorized{401, "", "{\"error\":{\"code\":\"unauthorized\",\"message\":\"no\"}}"};
  EXPECT_EQ(read_bulk_answer(unauthorized, 3).kind, BulkVerdict::Kind::kTransient);
  HttpAnswer garbage{200, "", "<html>proxy</html>"};
  EXPECT_EQ(read_bulk_answer(garbage, 3).kind, BulkVerdict::Kind::kTransient);
  HttpAnswer no_results{200, "", "{\"lines\":3}"};
  EXPECT_EQ(read_bulk_answer(no_results, 3).kind, BulkVerdict::Kind::kTransient);
}

TEST(KafkaBridgeAnswers, SingleRouteAnswers) {
  EXPECT_EQ(read_single_answer(HttpAnswer{202, "", "{\"event_id\":\"a\"}"}).outcome,
            Outcome::kAccepted);
  EXPECT_EQ(read_single_answer(HttpAnswer{200, "", "{\"event_id\":\"a\"}"}).outcome,
            Outcome::kDuplicate);
  LineResult dup = read_single_answer(
      HttpAnswer{400, "", "{\"error\":{\"code\":\"duplicate_field\",\"message\":\"payload.a\"}}"});
  EXPECT_EQ(dup.outcome, Outcome::kPermanent);
  EXPECT_EQ(dup.code, "duplicate_field");
  LineResult bare = read_single_answer(HttpAnswer{400, "", "bad"});
  EXPECT_EQ(bare.outcome, Outcome::kPermanent);
  EXPECT_EQ(bare.code, "http_400");
  EXPECT_EQ(read_single_answer(HttpAnswer{0, "timeout", ""}).outcome, Outcome::kTransient);
}

}  // namespace
}  // namespace ringcast::kafka_bridge
