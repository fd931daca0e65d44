// The notification outbox on Redis (SPEC R8.4 across a crash), on a real redis-server: a
// notification written with the outbox on is handed to on_outbox when its partition is recovered —
// by this store or by another one, as after its node died — with every field; outbox_done() removes
// it, so the next recovery hands nothing; with the outbox off nothing is kept.
#include <gtest/gtest.h>

#include <vector>

#include "storage/redis_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"

namespace ringcast::storage::test {
namespace {

class CollectVisitor final : public RecoveryVisitor {
 public:
  void on_endpoint(const Endpoint&) override {}
  void on_tenant(const Tenant&) override {}
  void on_delivery(const Delivery&) override {}
};

class RedisOutboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ringcast::test::RedisServer::available())
      RINGCAST_SKIP_MISSING() << "redis-server is not installed (bash tools/install-deps.sh)";
    server_ = ringcast::test::RedisServer::start(dir_.path());
  }
  std::unique_ptr<RedisStore> open(bool outbox, std::vector<Notification>* handed,
                                   std::vector<Notification>* mailed = nullptr) {
    RedisStoreOptions o;
    o.servers = {server_->address()};
    o.command_timeout = seconds(5);
    o.notification_outbox = outbox;
    o.mail_outbox = outbox;
    if (mailed != nullptr) {
      o.on_mail_outbox = [mailed](std::vector<Notification> v) {
        mailed->insert(mailed->end(), v.begin(), v.end());
      };
    }
    if (handed != nullptr) {
      o.on_outbox = [handed](std::vector<Notification> v) {
        handed->insert(handed->end(), v.begin(), v.end());
      };
    }
    auto s = RedisStore::open(o);
    EXPECT_TRUE(s.ok());
    return s.ok() ? std::move(*s) : nullptr;
  }
  Notification note(uint64_t seq_in_partition) {
    Notification n;
    n.seq = make_id(partition_of(tenant_), seq_in_partition);
    n.tenant = tenant_;
    n.endpoint = make_id(partition_of(tenant_), 2);
    n.kind = "endpoint_disabled";
    n.reason = ErrorCode::http(503);
    n.at = kT0;
    n.message = "endpoint exhausted its attempts";
    return n;
  }
  void write(RedisStore& s, std::vector<Notification> ns) {
    Mutations m;
    m.notifications = std::move(ns);
    auto seq = s.write(m);
    ASSERT_TRUE(seq.ok()) << seq.error().message;
    ASSERT_TRUE(s.wait_durable(*seq, seconds(5)));
  }

  ringcast::test::TempDir dir_{"ringcast-redis-outbox"};
  std::unique_ptr<ringcast::test::RedisServer> server_;
  std::string tenant_ = "acme";
};

TEST_F(RedisOutboxTest, AnUnsentNotificationIsHandedToTheNextOwnerUntilDone) {
  auto first = open(true, nullptr);
  ASSERT_TRUE(first);
  write(*first, {note(10), note(11)});
  first.reset();  // the node dies before its webhook POSTs them

  std::vector<Notification> handed;
  auto next = open(true, &handed);
  ASSERT_TRUE(next);
  CollectVisitor v;
  ASSERT_TRUE(next->recover(partition_of(tenant_), kT0, v).ok());
  ASSERT_EQ(handed.size(), 2u);
  EXPECT_EQ(handed[0].seq, note(10).seq);  // oldest first
  EXPECT_EQ(handed[1].seq, note(11).seq);
  EXPECT_EQ(handed[0].tenant, tenant_);
  EXPECT_EQ(handed[0].endpoint, note(10).endpoint);
  EXPECT_EQ(handed[0].kind, "endpoint_disabled");
  EXPECT_EQ(handed[0].reason, ErrorCode::http(503));
  EXPECT_EQ(handed[0].message, "endpoint exhausted its attempts");
  // Another partition's recovery hands none of them.
  handed.clear();
  ASSERT_TRUE(
      next->recover(static_cast<Partition>((partition_of(tenant_) + 1) % kPartitions), kT0, v)
          .ok());
  EXPECT_TRUE(handed.empty());

  // POSTed (or given up): it leaves the outbox; the other one stays.
  ASSERT_TRUE(next->outbox_done(note(10).seq).ok());
  handed.clear();
  ASSERT_TRUE(next->recover(partition_of(tenant_), kT0, v).ok());
  ASSERT_EQ(handed.size(), 1u);
  EXPECT_EQ(handed[0].seq, note(11).seq);
  // The notifications themselves stay listed either way.
  auto listed = next->list_notifications(tenant_, 10);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 2u);
}

// SPEC R8.4: the owner's e-mail's outbox (T om) beside the webhook's: only a notification with
// an owner_email gets an entry, handed to on_mail_outbox with what the e-mail needs, until
// mail_outbox_done(); the webhook's entries are not touched by it.
TEST_F(RedisOutboxTest, TheMailOutboxIsHandedOverUntilTheEmailIsDone) {
  auto first = open(true, nullptr);
  ASSERT_TRUE(first);
  Notification with = note(30), without = note(31);
  with.owner_email = "owner@shop.example";
  with.endpoint_url = "https://hooks.example/in";
  with.trigger = make_id(partition_of(tenant_), 5);
  with.attempts = 8;
  with.last_http_status = 503;
  write(*first, {with, without});
  first.reset();

  std::vector<Notification> handed, mailed;
  auto next = open(true, &handed, &mailed);
  ASSERT_TRUE(next);
  CollectVisitor v;
  ASSERT_TRUE(next->recover(partition_of(tenant_), kT0, v).ok());
  EXPECT_EQ(handed.size(), 2u);
  ASSERT_EQ(mailed.size(), 1u);
  EXPECT_EQ(mailed[0].seq, with.seq);
  EXPECT_EQ(mailed[0].owner_email, "owner@shop.example");
  EXPECT_EQ(mailed[0].endpoint_url, "https://hooks.example/in");
  EXPECT_EQ(mailed[0].trigger, with.trigger);
  EXPECT_EQ(mailed[0].attempts, 8);
  EXPECT_EQ(mailed[0].last_http_status, 503);

  ASSERT_TRUE(next->mail_outbox_done(with.seq).ok());
  handed.clear();
  mailed.clear();
  ASSERT_TRUE(next->recover(partition_of(tenant_), kT0, v).ok());
  EXPECT_TRUE(mailed.empty());
  EXPECT_EQ(handed.size(), 2u);  // the webhook's entries stay until outbox_done
}

TEST_F(RedisOutboxTest, WithoutTheOutboxNothingIsKept) {
  auto s = open(false, nullptr);
  ASSERT_TRUE(s);
  write(*s, {note(20)});
  std::vector<Notification> handed;
  auto next = open(true, &handed);
  ASSERT_TRUE(next);
  CollectVisitor v;
  ASSERT_TRUE(next->recover(partition_of(tenant_), kT0, v).ok());
  EXPECT_TRUE(handed.empty());
}

}  // namespace
}  // namespace ringcast::storage::test
