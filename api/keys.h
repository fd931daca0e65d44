// Tenant-scoped API keys (SPEC R14.1). A key is "rck_<id>_<secret>": 16 hex digits that name it
// (public: the prefix shown in lists) and 64 hex digits of secret. The store keeps the SHA-256 of
// the secret, never the key (core/store.h put_api_key). Invariants: a key is checked against the
// hash in constant time; the registry answers check() from memory (the HTTP loop never waits on
// the store for a key); a change made on this node is in memory before the admin's call returns;
// a change made by another node (cluster mode) is seen within `refresh` (the version is polled).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "core/store.h"
#include "core/time.h"
#include "core/types.h"

namespace ringcast::api {

inline constexpr std::string_view kKeyPrefix = "rck_";
inline constexpr size_t kKeyIdHex = 16;
inline constexpr size_t kKeySecretHex = 64;
inline constexpr size_t kMaxKeysPerTenant = 50;  // the too_many_keys message says 50
inline constexpr size_t kMaxKeyNameBytes = 100;

// What a key proves: the tenant it reaches and whether it may write.
struct KeyIdentity {
  std::string id;
  std::string tenant;
  bool read_only = false;
};

enum class KeyCheck : uint8_t {
  kOk,
  kNotAKey,  // does not look like "rck_<id>_<secret>"
  kUnknown,  // no such key (never made, or revoked), or the secret does not match
  kExpired,  // the secret matches, the key is past its expires_at
};

struct KeyCheckResult {
  KeyCheck check = KeyCheck::kNotAKey;
  KeyIdentity who;  // set when kOk
};

// A key made by create(): the text, shown once, and its record.
struct NewKey {
  std::string text;
  ApiKey record;
};

struct KeyRegistryOptions {
  Store* store = nullptr;  // null: no keys (every check is kUnknown, create fails)
  // How often the store's key version is polled for another node's change; zero: never (a
  // single node: this process makes every change).
  Duration refresh = Duration::zero();
};

class KeyRegistry {
 public:
  explicit KeyRegistry(KeyRegistryOptions options);
  ~KeyRegistry();  // stop()
  // Stops the refresher (before the store closes). Idempotent.
  void stop();
  KeyRegistry(const KeyRegistry&) = delete;
  KeyRegistry& operator=(const KeyRegistry&) = delete;

  // Loads every key and starts the refresher (when refresh > 0). Blocks on the store.
  Result<void> start();

  // Any thread; memory only.
  KeyCheckResult check(std::string_view key_text, WallTime now) const;
  std::vector<ApiKey> list(std::string_view tenant) const;  // oldest first
  // Whether the key `id` of `tenant` exists and has not expired at `now`: what a link, a
  // session or a forwarded call made with it still rests on (SPEC R14). Memory only.
  bool active(std::string_view id, std::string_view tenant, WallTime now) const;
  // The tenant's portal cutoff: links and sessions issued before it are ended (zero: none).
  // Memory only.
  WallTime portal_cutoff(std::string_view tenant) const;
  // Ends every portal link and session of `tenant` issued before `now`, on every node within
  // `refresh` (SPEC R14.3). Blocks on the store.
  Result<void> end_portal_sessions(const std::string& tenant, WallTime now);

  // Block on the store (call them off the HTTP loop). create: kLimitExceeded "too_many_keys"
  // past kMaxKeysPerTenant; revoke: kNotFound "unknown_key" (also for another tenant's key).
  Result<NewKey> create(const std::string& tenant, std::string name, bool read_only,
                        WallTime expires_at, WallTime now);
  Result<void> revoke(std::string_view tenant, std::string_view id);

  // Reloads now if the store's version moved (the refresher's step; tests call it).
  Result<void> refresh_now();
  uint64_t reloads() const { return reloads_.load(std::memory_order_relaxed); }

  // The key's prefix as shown in lists: "rck_<id>".
  static std::string prefix_of(const ApiKey& k);

 private:
  void replace(ApiKeySet set);
  void refresher();

  KeyRegistryOptions opt_;
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, ApiKey> keys_;       // by id
  std::unordered_map<std::string, WallTime> cutoffs_;  // by tenant
  uint64_t version_ = 0;
  std::mutex change_mu_;  // one create / revoke / reload at a time
  std::atomic<uint64_t> reloads_{0};

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ringcast::api
