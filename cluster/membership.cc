#include "cluster/membership.h"

#include <algorithm>

#include "cluster/keys.h"

namespace ringcast::cluster {

namespace {

// KEYS[1] members; ARGV: node id, now ms, live above (exclusive), forget below (exclusive).
constexpr const char* kBeatLua = R"lua(
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[4])
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[3], '+inf')
)lua";

}  // namespace

Membership::Membership(net::Loop& loop, redis::Client& client, MembershipOptions options,
                       OnBeat on_beat)
    : loop_(loop),
      client_(client),
      options_(std::move(options)),
      on_beat_(std::move(on_beat)),
      script_(kBeatLua),
      key_(members_key(options_.ns)) {
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
  const std::string args[] = {options_.node_id, std::to_string(now_ms),
                              std::to_string(now_ms - to_ms(options_.member_ttl)),
                              std::to_string(now_ms - to_ms(options_.forget_after))};
  const std::string_view keys[] = {key_};
  const std::string_view argv[] = {args[0], args[1], args[2], args[3]};
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
  if (!r.ok() || !r->is_array()) {
    stats_.beat_failures++;
    return;
  }
  stats_.beats++;
  std::vector<std::string> live;
  live.reserve(r->size() + 1);
  for (const auto& e : r->elements())
    if (e.is_string()) live.push_back(e.str());
  live.push_back(options_.node_id);
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
  client_.command(
      {"ZREM", key_, options_.node_id},
      [alive = alive_, done = std::move(done)](Result<redis::Reply> r) {
        if (*alive && done) done(r.ok() && !r->is_error());
      },
      o);
}

}  // namespace ringcast::cluster
