#include "api/keys.h"

#include <openssl/mem.h>
#include <openssl/sha.h>

#include <algorithm>

#include "net/signing.h"

namespace ringcast::api {
namespace {

bool lower_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string sha256(std::string_view s) {
  std::string out(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const uint8_t*>(s.data()), s.size(),
         reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

}  // namespace

KeyRegistry::KeyRegistry(KeyRegistryOptions options) : opt_(options) {}

KeyRegistry::~KeyRegistry() {
  stop();
}

void KeyRegistry::stop() {
  {
    std::lock_guard lk(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<void> KeyRegistry::start() {
  if (opt_.store == nullptr) return ok();
  {
    std::lock_guard lk(change_mu_);
    auto set = opt_.store->load_api_keys();
    if (!set) return set.error();
    replace(std::move(*set));
  }
  if (opt_.refresh > Duration::zero()) thread_ = std::thread([this] { refresher(); });
  return ok();
}

void KeyRegistry::replace(ApiKeySet set) {
  std::unordered_map<std::string, ApiKey> next;
  for (auto& k : set.keys) {
    std::string id = k.id;
    next.emplace(std::move(id), std::move(k));
  }
  std::unordered_map<std::string, WallTime> cutoffs;
  for (auto& [tenant, t] : set.portal_cutoffs) cutoffs[std::move(tenant)] = t;
  std::unique_lock lk(mu_);
  keys_ = std::move(next);
  cutoffs_ = std::move(cutoffs);
  version_ = set.version;
  reloads_.fetch_add(1, std::memory_order_relaxed);
}

Result<void> KeyRegistry::refresh_now() {
  if (opt_.store == nullptr) return ok();
  std::lock_guard lk(change_mu_);
  auto v = opt_.store->api_keys_version();
  if (!v) return v.error();
  {
    std::shared_lock rl(mu_);
    if (*v == version_) return ok();
  }
  auto set = opt_.store->load_api_keys();
  if (!set) return set.error();
  replace(std::move(*set));
  return ok();
}

void KeyRegistry::refresher() {
  std::unique_lock lk(stop_mu_);
  while (!stop_) {
    stop_cv_.wait_for(lk, opt_.refresh, [this] { return stop_; });
    if (stop_) break;
    lk.unlock();
    (void)refresh_now();  // a store that does not answer: the keys known stay in force
    lk.lock();
  }
}

KeyCheckResult KeyRegistry::check(std::string_view text, WallTime now) const {
  KeyCheckResult r;
  if (text.size() != kKeyPrefix.size() + kKeyIdHex + 1 + kKeySecretHex ||
      text.substr(0, kKeyPrefix.size()) != kKeyPrefix || text[kKeyPrefix.size() + kKeyIdHex] != '_')
    return r;
  const std::string_view id = text.substr(kKeyPrefix.size(), kKeyIdHex);
  const std::string_view secret = text.substr(kKeyPrefix.size() + kKeyIdHex + 1);
  if (!lower_hex(id) || !lower_hex(secret)) return r;
  r.check = KeyCheck::kUnknown;
  const std::string hash = sha256(secret);
  std::shared_lock lk(mu_);
  auto it = keys_.find(std::string(id));
  if (it == keys_.end()) return r;
  const ApiKey& k = it->second;
  if (k.secret_hash.size() != hash.size() ||
      CRYPTO_memcmp(k.secret_hash.data(), hash.data(), hash.size()) != 0)
    return r;
  if (k.expires_at != WallTime() && now >= k.expires_at) {
    r.check = KeyCheck::kExpired;
    return r;
  }
  r.check = KeyCheck::kOk;
  r.who = KeyIdentity{k.id, k.tenant, k.read_only};
  return r;
}

bool KeyRegistry::active(std::string_view id, std::string_view tenant, WallTime now) const {
  std::shared_lock lk(mu_);
  auto it = keys_.find(std::string(id));
  if (it == keys_.end()) return false;
  const ApiKey& k = it->second;
  return k.tenant == tenant && (k.expires_at == WallTime() || now < k.expires_at);
}

WallTime KeyRegistry::portal_cutoff(std::string_view tenant) const {
  std::shared_lock lk(mu_);
  auto it = cutoffs_.find(std::string(tenant));
  return it == cutoffs_.end() ? WallTime() : it->second;
}

Result<void> KeyRegistry::end_portal_sessions(const std::string& tenant, WallTime now) {
  if (opt_.store == nullptr) {
    return make_error(Errc::kUnavailable, "no key store", nullptr, "not_supported");
  }
  std::lock_guard lk(change_mu_);
  auto r = opt_.store->put_portal_cutoff(tenant, now);
  if (!r) return r;
  std::unique_lock wl(mu_);
  cutoffs_[tenant] = now;
  return ok();
}

std::vector<ApiKey> KeyRegistry::list(std::string_view tenant) const {
  std::vector<ApiKey> out;
  {
    std::shared_lock lk(mu_);
    for (const auto& [id, k] : keys_) {
      if (k.tenant == tenant) out.push_back(k);
    }
  }
  std::sort(out.begin(), out.end(), [](const ApiKey& a, const ApiKey& b) {
    return a.created_at != b.created_at ? a.created_at < b.created_at : a.id < b.id;
  });
  return out;
}

Result<NewKey> KeyRegistry::create(const std::string& tenant, std::string name, bool read_only,
                                   WallTime expires_at, WallTime now) {
  if (opt_.store == nullptr) {
    return make_error(Errc::kUnavailable, "no key store", nullptr, "not_supported");
  }
  std::lock_guard lk(change_mu_);
  if (list(tenant).size() >= kMaxKeysPerTenant) {
    return make_error(Errc::kLimitExceeded, "a tenant has at most 50 keys: revoke one first",
                      nullptr, "too_many_keys");
  }
  NewKey n;
  n.record.tenant = tenant;
  n.record.name = std::move(name);
  n.record.read_only = read_only;
  n.record.created_at = now;
  n.record.expires_at = expires_at;
  {
    std::shared_lock rl(mu_);
    do {
      n.record.id = net::random_hex(kKeyIdHex / 2);
    } while (keys_.count(n.record.id) != 0);
  }
  const std::string secret = net::random_hex(kKeySecretHex / 2);
  n.record.secret_hash = sha256(secret);
  if (auto r = opt_.store->put_api_key(n.record); !r) return r.error();
  n.text.reserve(kKeyPrefix.size() + kKeyIdHex + 1 + kKeySecretHex);
  n.text += kKeyPrefix;
  n.text += n.record.id;
  n.text += '_';
  n.text += secret;
  {
    std::unique_lock wl(mu_);
    keys_[n.record.id] = n.record;
  }
  return n;
}

Result<void> KeyRegistry::revoke(std::string_view tenant, std::string_view id) {
  if (opt_.store == nullptr) {
    return make_error(Errc::kUnavailable, "no key store", nullptr, "not_supported");
  }
  std::lock_guard lk(change_mu_);
  {
    std::shared_lock rl(mu_);
    auto it = keys_.find(std::string(id));
    if (it == keys_.end() || it->second.tenant != tenant) {
      return make_error(Errc::kNotFound, "no such key", "key", "unknown_key");
    }
  }
  if (auto r = opt_.store->delete_api_key(id); !r) return r.error();
  std::unique_lock wl(mu_);
  keys_.erase(std::string(id));
  return ok();
}

std::string KeyRegistry::prefix_of(const ApiKey& k) {
  std::string s(kKeyPrefix);
  s += k.id;
  return s;
}

}  // namespace ringcast::api
