#include "engine/mailer.h"

#include <pthread.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/classify.h"
#include "log/log.h"
#include "net/tls.h"
#include "views/records.h"

namespace ringcast::engine {
namespace {

using SteadyClock = std::chrono::steady_clock;

// scheme://[userinfo@]host[:port]/... → host (brackets kept for IPv6 literals).
std::string url_host(std::string_view url) {
  size_t start = url.find("://");
  start = start == std::string_view::npos ? 0 : start + 3;
  size_t end = url.find_first_of("/?#", start);
  std::string_view auth = url.substr(start, end == std::string_view::npos ? url.npos : end - start);
  if (size_t at = auth.rfind('@'); at != std::string_view::npos) auth.remove_prefix(at + 1);
  if (!auth.empty() && auth.front() == '[') {
    size_t close = auth.find(']');
    return std::string(auth.substr(0, close == std::string_view::npos ? auth.size() : close + 1));
  }
  if (size_t colon = auth.find(':'); colon != std::string_view::npos) auth = auth.substr(0, colon);
  return std::string(auth);
}

// Control characters (a stored value from an older version, a hand-edited record) become
// spaces in a line of the body: nothing in it can break the e-mail's structure.
std::string one_line(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

std::string percent_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string replace_all(std::string s, std::string_view what, std::string_view with) {
  for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; at += with.size())
    s.replace(at, what.size(), with);
  return s;
}

}  // namespace

std::string owner_email_message_id(const Notification& n, std::string_view from) {
  std::string domain = "ringcast.invalid";
  if (size_t at = from.rfind('@'); at != std::string_view::npos && at + 1 < from.size())
    domain = std::string(from.substr(at + 1));
  std::string id = "ntf_";
  id += std::to_string(n.seq);
  id += ".ringcast@";
  id += domain;
  return id;
}

std::string portal_link(std::string_view tmpl, std::string_view tenant, EndpointId endpoint) {
  std::string out = replace_all(std::string(tmpl), "{tenant}", percent_encode(tenant));
  return replace_all(std::move(out), "{endpoint}", std::to_string(endpoint));
}

std::string disable_reason_sentence(const Notification& n) {
  using K = ErrorCode::Kind;
  const std::string code = n.reason.is_none() ? std::string("unknown") : n.reason.str();
  std::string tail = " on every attempt until the retry schedule was used up";
  if (n.attempts > 0) {
    tail = " on every attempt until the retry schedule was used up (";
    tail += std::to_string(n.attempts);
    tail += " attempts)";
  }
  switch (n.reason.kind) {
    case K::kGone:
      return "The receiver answered 410 Gone: it asked for no more deliveries, so the endpoint "
             "was disabled at once.";
    case K::kHttp: {
      std::string s = "The receiver answered HTTP ";
      s += std::to_string(n.reason.detail);
      s += tail;
      s += '.';
      return s;
    }
    case K::kTimeout:
      return "The receiver did not answer within the request deadline" + tail + ".";
    case K::kNetwork:
    case K::kTlsHandshake:
      return "The connection to the receiver failed (" + code + ")" + tail + ".";
    case K::kTlsCert:
      return "The receiver's TLS certificate did not verify" + tail + ".";
    case K::kDnsFailed:
      return "The receiver's host name did not resolve" + tail + ".";
    case K::kRedirectNotAllowed:
      return "The receiver answered with a redirect, and redirects are never followed" + tail + ".";
    case K::kPrivateAddress:
      return "The receiver's host resolves into a private or special address range, where "
             "nothing is sent" +
             tail + ".";
    default:
      // The SPEC R6 URL form codes (core/classify.h; the private address is answered above).
      if (is_config_refusal(n.reason)) {
        return "The endpoint's URL fails the URL check (" + code + ")" + tail + ".";
      }
      return "Delivery failed (" + code + ")" + tail + ".";
  }
}

bool owner_email_message(const MailerOptions& o, const Notification& n, std::string& out,
                         std::string* why) {
  net::MailMessage m;
  m.from = o.from;
  m.from_name = one_line(o.from_name);
  m.to = n.owner_email;
  const std::string host = one_line(url_host(n.endpoint_url));
  m.subject = "[ringcast] Webhook endpoint disabled: ";
  m.subject += host.empty() ? std::to_string(n.endpoint) : host;
  m.message_id = owner_email_message_id(n, o.from);
  m.date = n.at;
  const std::string code = n.reason.is_none() ? std::string("unknown") : n.reason.str();
  std::string& b = m.body;
  b = "Your webhook endpoint was disabled by ringcast, and it receives no more deliveries.\n\n";
  b += "Endpoint:    ";
  b += std::to_string(n.endpoint);
  b += "\nURL:         ";
  b += one_line(n.endpoint_url.empty() ? std::string("(unknown)") : n.endpoint_url);
  b += "\nTenant:      ";
  b += one_line(n.tenant);
  b += "\nReason:      ";
  b += code;
  b += "\n             ";
  b += disable_reason_sentence(n);
  b += "\nLast error:  ";
  if (n.last_http_status != 0) {
    b += "HTTP ";
    b += std::to_string(n.last_http_status);
    b += " (";
    b += code;
    b += ')';
  } else {
    b += code;
    b += " (no HTTP answer)";
  }
  if (n.trigger != 0) {
    b += "\nDelivery:    ";
    b += std::to_string(n.trigger);
    if (n.attempts > 0) {
      b += ", ";
      b += std::to_string(n.attempts);
      b += n.attempts == 1 ? " attempt" : " attempts";
    }
  }
  b += "\nDisabled at: ";
  b += views::rfc3339(n.at);
  b += "\n\nThe deliveries still queued for this endpoint were stopped: they are not sent when "
       "it is enabled again.\n\n";
  b += "To recover:\n"  // SPEC R8.5
       "  1. Fix the receiver at the URL above.\n"
       "  2. Send a test event to the endpoint and check that it answers 2xx.\n"
       "  3. Enable the endpoint again.\n";
  if (!o.portal_url.empty()) {
    b += "\nManage this endpoint: ";
    b += one_line(portal_link(o.portal_url, n.tenant, n.endpoint));
    b += '\n';
  }
  b += "\n-- \nThis message was sent automatically by ringcast (notification ";
  b += std::to_string(n.seq);
  b += ").\n";
  return net::build_mail_message(m, out, why);
}

bool confirmation_email_message(const MailerOptions& o, const Notification& n,
                                std::string_view link, std::string& out, std::string* why) {
  net::MailMessage m;
  m.from = o.from;
  m.from_name = one_line(o.from_name);
  m.to = n.owner_email;
  m.subject = "[ringcast] Confirm this address for webhook notices";
  m.message_id = owner_email_message_id(n, o.from);
  m.date = n.at;
  std::string& b = m.body;
  b = "This address was given as the owner's address for the webhooks of ";
  b += one_line(n.tenant);
  b += ".\nIt gets notices (for instance when an endpoint is disabled) only once you confirm "
       "it:\n\n  ";
  b += one_line(std::string(link));
  b += "\n\nThe link works for a limited time. If you did not expect this message, ignore it: "
       "nothing more is sent to this address unless it is confirmed.\n";
  b += "\n-- \nThis message was sent automatically by ringcast (notification ";
  b += std::to_string(n.seq);
  b += ").\n";
  return net::build_mail_message(m, out, why);
}

Mailer::Mailer(MailerOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<Mailer>> Mailer::start(MailerOptions options) {
  if (options.queue_max == 0)
    return make_error(Errc::kInvalidArgument, "mailer: queue_max must be > 0", "queue_max");
  if (!net::smtp_address_ok(options.from))
    return make_error(Errc::kInvalidArgument, "mailer: from is not a plain address", "from");
  if (options.smtp.starttls != net::SmtpStartTls::kOff) {
    // A CA file that holds no certificate is a configuration error: found now, not at the
    // first disable (when every e-mail would be given up).
    net::TlsClientOptions to;
    to.ca_file = options.smtp.ca_file;
    to.extra_ca_file = options.smtp.extra_ca_file;
    to.session_resumption = false;
    if (!net::TlsClientContext::create(to).ok())
      return make_error(Errc::kInvalidArgument,
                        "notifications.smtp.ca_file: no TLS trust anchor could be loaded",
                        "ca_file");
  }
  if (!options.send) {
    options.send = [](const net::SmtpOptions& o, const net::SmtpEnvelope& e, std::string_view m) {
      return net::smtp_send(o, e, m);
    };
  }
  std::unique_ptr<Mailer> m(new Mailer(std::move(options)));
  m->thread_ = std::thread(&Mailer::thread_main, m.get());
  return m;
}

Mailer::~Mailer() {
  stop();
}

bool Mailer::enqueue(const Notification& n) {
  if (n.owner_email.empty() ||
      (n.kind != "endpoint_disabled" && n.kind != "owner_email_confirmation"))
    return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) {
      metrics_.dropped.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    // The bound covers the one being sent too.
    while (!queue_.empty() && queue_.size() + (sending_ ? 1 : 0) >= options_.queue_max) {
      queue_.pop_front();
      metrics_.dropped.fetch_add(1, std::memory_order_relaxed);
    }
    if (queue_.size() + (sending_ ? 1 : 0) >= options_.queue_max) {
      metrics_.dropped.fetch_add(1, std::memory_order_relaxed);  // queue_max 1, one being sent
      return true;
    }
    Item it;
    it.note = n;
    it.next_at = SteadyClock::now();
    queue_.push_back(std::move(it));
    metrics_.queued.store(static_cast<int64_t>(queue_.size() + (sending_ ? 1 : 0)),
                          std::memory_order_relaxed);
  }
  cv_.notify_one();
  return true;
}

void Mailer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_requested_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

MailerStats Mailer::stats() const {
  MailerStats s;
  s.sent = metrics_.sent.load(std::memory_order_relaxed);
  s.failed = metrics_.failed.load(std::memory_order_relaxed);
  s.dropped = metrics_.dropped.load(std::memory_order_relaxed);
  s.attempts = attempts_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  s.queued = queue_.size() + (sending_ ? 1 : 0);
  s.last_error = last_error_;
  return s;
}

void Mailer::thread_main() {
  ::pthread_setname_np(::pthread_self(), "rc-mailer");
  std::unique_lock<std::mutex> lock(mu_);
  bool draining = false;
  SteadyClock::time_point drain_deadline;
  for (;;) {
    if (!draining && stop_requested_) {
      draining = true;
      accepting_ = false;
      drain_deadline = SteadyClock::now() + options_.stop_drain;
    }
    const auto now = SteadyClock::now();
    if (draining && now >= drain_deadline) break;
    // The due item that came first (the queue is in arrival order).
    auto due = std::find_if(queue_.begin(), queue_.end(),
                            [&](const Item& it) { return it.next_at <= now; });
    if (due == queue_.end()) {
      if (draining && std::none_of(queue_.begin(), queue_.end(),
                                   [&](const Item& it) { return it.next_at <= drain_deadline; }))
        break;
      auto wake = draining ? drain_deadline : now + seconds(60);
      for (const Item& it : queue_) wake = std::min(wake, it.next_at);
      cv_.wait_until(lock, wake);
      continue;
    }
    Item item = std::move(*due);
    queue_.erase(due);
    sending_ = true;
    lock.unlock();
    attempt(item);  // may put it back (a transient failure with ladder left)
    lock.lock();
  }
  metrics_.dropped.fetch_add(queue_.size(), std::memory_order_relaxed);
  queue_.clear();
  metrics_.queued.store(0, std::memory_order_relaxed);
}

void Mailer::attempt(Item& item) {
  std::string message, why;
  net::SmtpResult r;
  bool built = false;
  if (item.note.kind == "owner_email_confirmation") {
    Result<std::string> link =
        options_.confirmation_link
            ? options_.confirmation_link(item.note)
            : make_error(Errc::kInvalidArgument, "no confirmation link can be made");
    if (!link) {
      r = net::SmtpError{link.error().code == Errc::kUnavailable, 0, "link", link.error().message};
    } else {
      built = confirmation_email_message(options_, item.note, *link, message, &why);
      if (!built) r = net::SmtpError{false, 0, "message", why};
    }
  } else {
    built = owner_email_message(options_, item.note, message, &why);
    if (!built) r = net::SmtpError{false, 0, "message", why};
  }
  if (built) {
    net::SmtpEnvelope env;
    env.from = options_.from;
    env.to = {item.note.owner_email};
    r = options_.send(options_.smtp, env, message);
    attempts_.fetch_add(1, std::memory_order_relaxed);
  }
  item.attempts++;
  bool finished = true;
  if (r.ok()) {
    metrics_.sent.fetch_add(1, std::memory_order_relaxed);
  } else {
    const std::string err = r.error().describe();
    const size_t pause_index = item.attempts - 1u;
    if (r.error().transient && pause_index < options_.retry_ladder.size()) {
      finished = false;
      item.next_at = SteadyClock::now() + options_.retry_ladder[pause_index];
    } else {
      metrics_.failed.fetch_add(1, std::memory_order_relaxed);
      // SPEC R14: what a relay answered to AUTH is not logged (it may echo the credentials).
      const std::string shown = r.error().stage == "auth"
                                    ? fmt::format("auth: {} (reply not shown)", r.error().code)
                                    : err;
      log::error("owner_email_failed",
                 {{"tenant", item.note.tenant},
                  log::Field::id("notification", item.note.seq),
                  {"stage", r.error().stage},
                  {"smtp_code", r.error().code},
                  {"error", shown}},
                 "owner e-mail for notification {} to {} failed: {}",
                 static_cast<unsigned long long>(item.note.seq),
                 one_line(item.note.owner_email).c_str(), shown.c_str());
    }
    std::lock_guard<std::mutex> lock(mu_);
    last_error_ = err;
  }
  if (finished && options_.on_finished) options_.on_finished(item.note);
  std::lock_guard<std::mutex> lock(mu_);
  sending_ = false;
  if (!finished) {
    // Back in arrival order is not needed: due times decide; it goes first (it came first).
    queue_.push_front(std::move(item));
  }
  metrics_.queued.store(static_cast<int64_t>(queue_.size()), std::memory_order_relaxed);
}

}  // namespace ringcast::engine
