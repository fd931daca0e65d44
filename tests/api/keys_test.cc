// api/keys: a tenant key is "rck_<id>_<secret>", stored as the SHA-256 of its secret only,
// checked from memory; revocation and expiry hold; another node's change is seen at the next
// refresh (two registries over one store stand for two nodes).
#include "api/keys.h"

#include <gtest/gtest.h>

#include "tests/support/memory_store.h"

namespace ringcast::api {
namespace {

const WallTime kT0 = WallTime::from_ns(1'800'000'000'000'000'000);

TEST(KeyRegistry, AKeyIsCheckedAgainstItsHashAndReachesItsTenant) {
  MemoryStore store;
  KeyRegistry reg(KeyRegistryOptions{&store, Duration::zero()});
  ASSERT_TRUE(reg.start().ok());
  auto made = reg.create("acme", "ci", false, WallTime(), kT0);
  ASSERT_TRUE(made.ok()) << made.error().message;
  const std::string& key = made->text;
  ASSERT_EQ(key.size(), 4u + 16 + 1 + 64);
  EXPECT_EQ(key.substr(0, 4 + 16), KeyRegistry::prefix_of(made->record));
  // The store holds the hash, not the secret.
  auto stored = store.load_api_keys();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->keys.size(), 1u);
  EXPECT_EQ(stored->keys[0].secret_hash.size(), 32u);
  EXPECT_EQ(stored->keys[0].secret_hash.find(key.substr(21)), std::string::npos);

  KeyCheckResult c = reg.check(key, kT0);
  ASSERT_EQ(c.check, KeyCheck::kOk);
  EXPECT_EQ(c.who.tenant, "acme");
  EXPECT_FALSE(c.who.read_only);
  // One wrong hex digit of the secret, of the id; not a key at all.
  std::string bad = key;
  bad.back() = bad.back() == '0' ? '1' : '0';
  EXPECT_EQ(reg.check(bad, kT0).check, KeyCheck::kUnknown);
  bad = key;
  bad[5] = bad[5] == '0' ? '1' : '0';
  EXPECT_EQ(reg.check(bad, kT0).check, KeyCheck::kUnknown);
  for (std::string_view not_key : {std::string_view("e2e-token"), std::string_view("rck_"),
                                   std::string_view(key).substr(0, key.size() - 1)}) {
    EXPECT_EQ(reg.check(not_key, kT0).check, KeyCheck::kNotAKey) << not_key;
  }
  std::string upper = key;
  upper[30] = 'A';
  EXPECT_EQ(reg.check(upper, kT0).check, KeyCheck::kNotAKey);

  // Revoked: through its own tenant only.
  EXPECT_FALSE(reg.revoke("zeta", made->record.id).ok());
  EXPECT_EQ(reg.check(key, kT0).check, KeyCheck::kOk);
  ASSERT_TRUE(reg.revoke("acme", made->record.id).ok());
  EXPECT_EQ(reg.check(key, kT0).check, KeyCheck::kUnknown);
  EXPECT_TRUE(reg.list("acme").empty());
}

TEST(KeyRegistry, ExpiryReadOnlyAndTheCap) {
  MemoryStore store;
  KeyRegistry reg(KeyRegistryOptions{&store, Duration::zero()});
  ASSERT_TRUE(reg.start().ok());
  auto ro = reg.create("acme", "", true, kT0 + minutes(5), kT0);
  ASSERT_TRUE(ro.ok());
  KeyCheckResult c = reg.check(ro->text, kT0 + minutes(4));
  ASSERT_EQ(c.check, KeyCheck::kOk);
  EXPECT_TRUE(c.who.read_only);
  EXPECT_EQ(reg.check(ro->text, kT0 + minutes(5)).check, KeyCheck::kExpired);
  for (size_t i = 1; i < kMaxKeysPerTenant; ++i) {
    ASSERT_TRUE(reg.create("acme", "", false, WallTime(), kT0).ok()) << i;
  }
  auto over = reg.create("acme", "", false, WallTime(), kT0);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, Errc::kLimitExceeded);
  EXPECT_TRUE(reg.create("zeta", "", false, WallTime(), kT0).ok());  // per tenant
  EXPECT_EQ(reg.list("acme").size(), kMaxKeysPerTenant);
}

TEST(KeyRegistry, AnotherNodesChangeIsSeenAtTheNextRefresh) {
  MemoryStore store;
  KeyRegistry a(KeyRegistryOptions{&store, Duration::zero()});
  KeyRegistry b(KeyRegistryOptions{&store, Duration::zero()});
  ASSERT_TRUE(a.start().ok());
  ASSERT_TRUE(b.start().ok());
  auto made = a.create("acme", "", false, WallTime(), kT0);
  ASSERT_TRUE(made.ok());
  EXPECT_EQ(b.check(made->text, kT0).check, KeyCheck::kUnknown);  // not yet
  ASSERT_TRUE(b.refresh_now().ok());
  EXPECT_EQ(b.check(made->text, kT0).check, KeyCheck::kOk);
  const uint64_t reloads = b.reloads();
  ASSERT_TRUE(b.refresh_now().ok());
  EXPECT_EQ(b.reloads(), reloads) << "no change, no reload";
  ASSERT_TRUE(a.revoke("acme", made->record.id).ok());
  ASSERT_TRUE(b.refresh_now().ok());
  EXPECT_EQ(b.check(made->text, kT0).check, KeyCheck::kUnknown);

  // The refresher thread does the same on its own.
  KeyRegistry c(KeyRegistryOptions{&store, milliseconds(10)});
  ASSERT_TRUE(c.start().ok());
  auto later = a.create("acme", "", false, WallTime(), kT0);
  ASSERT_TRUE(later.ok());
  bool seen = false;
  for (int i = 0; i < 500 && !seen; ++i) {
    seen = c.check(later->text, kT0).check == KeyCheck::kOk;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace ringcast::api
