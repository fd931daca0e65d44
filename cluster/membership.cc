#include "cluster/membership.h"

#include <algorithm>

#include "cluster/keys.h"
#include "cluster/lua_scripts.h"

namespace ringcast::cluster {

namespace {

// KEYS[1] members, KEYS[2] addr; ARGV: node id, now ms, live above (exclusive), forget below
// (exclusive), this node's address ('' = none). Returns {live ids, their addresses (false =
// none)}. Pruned members lose their address too; the lists stay small (one entry per node).
constexpr std::string_view kBeatLua = lua::membership_beat;

// KEYS[1] members, KEYS[2] addr; ARGV[1] node id.
constexpr std::string_view kLeaveLua = lua::membership_leave;

}  // namespace

Membership::Membership(net::Loop& loop, redis::Client& client, MembershipOptions options,
                       OnBeat on_beat)
    : loop_(loop),
      client_(client),
      options_(std::move(options)),
      on_beat_(std::move(on_beat)),
      script_(std::string(kBeatLua)),
      leave_script_(std::string(kLeaveLua)),
      key_(members_key(options_.ns)),
      addr_key_(addr_key(options_.ns)) {
  live_.push_back(options_.node_id);
  auto fire = [this] { beat(); };
  timer_ = std::make_unique<net::TimerFn<decltype(fire)>>(std::move(fire));
}

Membership::~Membership() {
  *alive_ = false;
  loop_.disarm(timer_.get());
}

void Membership::start() {
  running_ = true;
  beat();
}

void Membership::stop() {
  running_ = false;
  loop_.disarm(timer_.get());
}

void Membership::set_paused(bool paused) {
  paused_ = paused;
}

void Membership::beat_now() {
  if (!running_) return;
  loop_.disarm(timer_.get());
  beat();
}

void Membership::beat() {
  if (!running_) return;
  loop_.arm_after(timer_.get(), options_.heartbeat_interval);
  if (paused_ || in_flight_) return;  // one beat in flight at a time
  const int64_t now_ms = loop_.wall_now().ms();
  const std::string args[] = {
      options_.node_id, std::to_string(now_ms), std::to_string(now_ms - to_ms(options_.member_ttl)),
      std::to_string(now_ms - to_ms(options_.forget_after)), options_.advertise_url};
  const std::string_view keys[] = {key_, addr_key_};
  const std::string_view argv[] = {args[0], args[1], args[2], args[3], args[4]};
  redis::CommandOptions o;
  o.timeout = options_.command_timeout;
  in_flight_ = true;
  redis::evalsha(
      client_, script_, keys, argv,
      [this, alive = alive_](Result<redis::Reply> r) {
        if (*alive) on_reply(std::move(r));
      },
      o);
}

void Membership::on_reply(Result<redis::Reply> r) {
  in_flight_ = false;
  if (!r.ok() || !r->is_array() || r->size() != 2 || !(*r)[0].is_array() || !(*r)[1].is_array()) {
    stats_.beat_failures++;
    return;
  }
  stats_.beats++;
  const redis::Reply& ids = (*r)[0];
  const redis::Reply& addrs = (*r)[1];
  std::vector<std::string> live;
  live.reserve(ids.size() + 1);
  addresses_.clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_string()) continue;
    live.push_back(ids[i].str());
    if (i < addrs.size() && addrs[i].is_string()) addresses_[ids[i].str()] = addrs[i].str();
  }
  live.push_back(options_.node_id);
  if (!options_.advertise_url.empty()) addresses_[options_.node_id] = options_.advertise_url;
  std::sort(live.begin(), live.end());
  live.erase(std::unique(live.begin(), live.end()), live.end());
  const bool changed = live != live_;
  if (changed) {
    stats_.changes++;
    live_ = std::move(live);
  }
  if (running_ && on_beat_) on_beat_(live_, changed);
}

void Membership::leave(std::function<void(bool ok)> done) {
  stop();
  redis::CommandOptions o;
  o.timeout = options_.command_timeout;
  const std::string_view keys[] = {key_, addr_key_};
  const std::string_view argv[] = {options_.node_id};
  redis::evalsha(
      client_, leave_script_, keys, argv,
      [alive = alive_, done = std::move(done)](Result<redis::Reply> r) {
        if (*alive && done) done(r.ok() && !r->is_error());
      },
      o);
}

}  // namespace ringcast::cluster
