// The owner's e-mail on auto-disable (SPEC R8.4): for each endpoint_disabled
// notification that names an owner_email, one e-mail through the configured SMTP relay
// (net/smtp_client.h), from a thread of its own. Invariants, like the operator webhook's
// (engine/notifier.h): enqueue() never waits for I/O (a short critical section on a bounded
// queue), so a shard is never slowed by the relay; transient failures (4xx, connection, timeout)
// are retried on the ladder, permanent ones (5xx, a refused TLS peer or STARTTLS) are given up;
// every e-mail enqueued ends in exactly one of sent / failed / dropped once stop() has returned.
// At least once across a restart comes from the store's mail outbox (RocksStore /
// RedisStore::mail_outbox): on_finished removes the entry, a dropped e-mail keeps it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/result.h"
#include "core/time.h"
#include "core/types.h"
#include "engine/metrics.h"
#include "net/smtp_client.h"

namespace ringcast::engine {

struct MailerOptions {
  net::SmtpOptions smtp;  // the relay: host, port, STARTTLS policy, CA, AUTH, timeout
  std::string from;       // the sender address (envelope and From:)
  std::string from_name = "ringcast";
  // The embedding platform's page for one endpoint, with {tenant} and {endpoint} replaced
  // (URL-encoded): not a signed portal link (e-mails sit in inboxes for days; the platform's
  // page authenticates the merchant and mints a fresh link). Empty: no link in the e-mail.
  std::string portal_url;
  // The signed link that confirms n.owner_email for n.tenant (an "owner_email_confirmation"
  // notification, SPEC R14, docs/security.md "Owner e-mail"), made when the e-mail is sent so
  // it is never stored; kUnavailable: not yet (retried on the ladder); unset or another error:
  // the e-mail is given up.
  std::function<Result<std::string>(const Notification&)> confirmation_link;
  size_t queue_max = 1'000;  // waiting + retrying; when full the oldest waiting one is dropped
  // Pauses between attempts after a transient failure; used up: given up (failed).
  std::vector<Duration> retry_ladder = {seconds(1), seconds(5), seconds(30), minutes(2),
                                        minutes(10)};
  Duration stop_drain = seconds(2);  // stop(): due e-mails get this long, the rest is dropped
  // Called on the mailer's thread when an e-mail is done with: sent or given up. Not for one
  // dropped (stop, a full queue): the store's mail outbox sends those after a restart.
  std::function<void(const Notification&)> on_finished;
  // Tests: replaces net::smtp_send (the same contract).
  std::function<net::SmtpResult(const net::SmtpOptions&, const net::SmtpEnvelope&,
                                std::string_view)>
      send;
};

struct MailerStats {
  uint64_t sent = 0, failed = 0, dropped = 0;
  uint64_t queued = 0;     // not finished yet (waiting, retrying or being sent)
  uint64_t attempts = 0;   // SMTP sessions tried
  std::string last_error;  // SmtpError::describe() of the last failed attempt
};

// The e-mail for one notification (n.owner_email the recipient): subject, body (which
// endpoint, the reason with a sentence, the last error, when, the recovery steps of SPEC R8.5,
// the portal link), a Message-ID stable per notification. Refused (false) when the addresses
// cannot be used (build_mail_message's checks).
bool owner_email_message(const MailerOptions& o, const Notification& n, std::string& out,
                         std::string* why = nullptr);
// The e-mail that asks the owner to confirm n.owner_email (kind "owner_email_confirmation"):
// who asked (the tenant), the link, how long it lives, and that nothing happens without it.
bool confirmation_email_message(const MailerOptions& o, const Notification& n,
                                std::string_view link, std::string& out,
                                std::string* why = nullptr);
// "ntf_<seq>.ringcast@<domain of from>": the same on every resend of one notification.
std::string owner_email_message_id(const Notification& n, std::string_view from);
// The human sentence for a SPEC R6 code as an auto-disable reason.
std::string disable_reason_sentence(const Notification& n);
// The portal link: `tmpl` with {tenant} and {endpoint} replaced (percent-encoded).
std::string portal_link(std::string_view tmpl, std::string_view tenant, EndpointId endpoint);

class Mailer {
 public:
  static Result<std::unique_ptr<Mailer>> start(MailerOptions options);
  ~Mailer();  // stop()
  Mailer(const Mailer&) = delete;
  Mailer& operator=(const Mailer&) = delete;

  // Any thread; never blocks on I/O. Only endpoint_disabled and owner_email_confirmation
  // notifications with an owner_email are taken (true); the rest are ignored (false, not
  // counted). When the queue is full the
  // oldest waiting e-mail is dropped (counted). After stop(): dropped.
  bool enqueue(const Notification& n);
  // Stops taking e-mails, sends what is due within stop_drain (a session already running ends
  // by its own timeout), counts the rest as dropped, joins the thread. Idempotent.
  void stop();

  const MailerMetrics& metrics() const { return metrics_; }
  MailerStats stats() const;

 private:
  struct Item {
    Notification note;
    uint16_t attempts = 0;
    std::chrono::steady_clock::time_point next_at;
  };
  explicit Mailer(MailerOptions options);
  void thread_main();
  void attempt(Item& item);  // one SMTP session; outside mu_

  MailerOptions options_;
  MailerMetrics metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // oldest first; bounded by queue_max (the one being sent excluded)
  bool accepting_ = true;
  bool stop_requested_ = false;
  bool sending_ = false;
  std::string last_error_;
  std::atomic<uint64_t> attempts_{0};
  std::thread thread_;
};

}  // namespace ringcast::engine
