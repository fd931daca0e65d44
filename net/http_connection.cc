// A connection's I/O for the HTTP transport: connect completions, the TLS handshake driven
// through memory BIOs, the request written (SPEC R11), the response read and parsed (llhttp),
// then reuse or close.
#include <liburing.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/transport.h"
#include "core/types.h"
#include "core/url.h"
#include "net/buffer_ring.h"
#include "net/http_client_internal.h"
#include "net/http_response.h"
#include "net/loop.h"
#include "net/signing.h"
#include "net/tls.h"

namespace ringcast::net {

namespace {

// errno values after which another resolved address of the same answer may be tried.
bool is_connect_phase(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN:
    case EADDRNOTAVAIL:
    case EAFNOSUPPORT:
      return true;
    default:
      return false;
  }
}

}  // namespace

void Impl::fail_conn(Connection* c, ErrorCode code) {
  Exchange* ex = c->ex;
  close_conn(c);
  if (ex) fail(ex, code);
}

void Impl::on_conn_op(Connection* c, Connection::OpKind kind, int res, uint32_t flags) {
  c->in_callback = true;
  switch (kind) {
    case Connection::kConnectOp:
      c->connect_pending = false;
      if (c->state != ConnState::kClosing) on_connect(c, res);
      break;
    case Connection::kSendOp:
      c->send_pending = false;
      if (c->state != ConnState::kClosing) on_send(c, res);
      break;
    case Connection::kRecvOp: {
      if ((flags & IORING_CQE_F_MORE) == 0) c->recv_pending = false;  // (multishot) ended
      const char* data = c->rbuf.get();
      int bid = -1;
      if ((flags & IORING_CQE_F_BUFFER) != 0) {
        bid = static_cast<int>(flags >> IORING_CQE_BUFFER_SHIFT);
        data = rx_ring->data(static_cast<uint16_t>(bid));
      }
      if (c->state != ConnState::kClosing) on_recv(c, res, data);
      if (bid >= 0) rx_ring->recycle(static_cast<uint16_t>(bid));  // consumed synchronously
      break;
    }
  }
  c->in_callback = false;
  maybe_free(c);
}

void Impl::on_connect(Connection* c, int res) {
  Exchange* ex = c->ex;
  if (res < 0) {
    const int err = -res;
    close_conn(c);
    if (ex == nullptr) return;
    if (is_connect_phase(err) && ex->addr_idx + 1 < ex->addrs.size()) {
      ex->addr_idx++;  // another address of the same (checked) answer
      open_conn(ex->host, ex);
      return;
    }
    fail(ex, ErrorCode::network(err));
    return;
  }
  if (ex == nullptr) {  // cannot happen: a connecting connection always has its exchange
    close_conn(c);
    return;
  }
  loop.disarm(&ex->phase_timer);
  ex->op->result.timings.connect = loop.now() - ex->t_mark;
  if (!post_recv(c)) {
    fail_conn(c, ErrorCode::network(ENOBUFS));
    return;
  }
  if (c->host->tls) {
    start_tls(c);
  } else {
    c->state = ConnState::kActive;
    write_request(c);
  }
}

void Impl::start_tls(Connection* c) {
  Exchange* ex = c->ex;
  c->tls = std::make_unique<TlsStream>();
  if (!tls || !c->tls->init(*tls, ex->url.host, ex->url.host_is_ip, c->host->session_key)) {
    fail_conn(c, ErrorCode::of(K::kTlsHandshake));
    return;
  }
  c->state = ConnState::kHandshaking;
  ex->phase = Phase::kHandshake;
  ex->t_mark = loop.now();
  loop.arm(&ex->phase_timer, ex->t_mark + opt.tls_handshake_timeout);
  drive_handshake(c);
}

void Impl::drive_handshake(Connection* c) {
  const TlsStream::Status s = c->tls->handshake();
  c->tls->take_output(send_buffer(c));
  if (!kick_send(c)) {
    fail_conn(c, ErrorCode::network(ENOBUFS));
    return;
  }
  switch (s) {
    case TlsStream::Status::kOk: {
      Exchange* ex = c->ex;
      loop.disarm(&ex->phase_timer);
      ex->op->result.timings.tls = loop.now() - ex->t_mark;
      c->state = ConnState::kActive;
      write_request(c);
      return;
    }
    case TlsStream::Status::kWantRead:
      return;
    case TlsStream::Status::kCertError:
      fail_conn(c, ErrorCode::of(K::kTlsCert));
      return;
    default:
      fail_conn(c, ErrorCode::of(K::kTlsHandshake));
      return;
  }
}

std::string& Impl::send_buffer(Connection* c) {
  if (c->send_pending) return c->out_next;
  if (c->out_off == c->out.size()) {
    c->out.clear();
    c->out_off = 0;
  }
  return c->out;
}

bool Impl::kick_send(Connection* c) {
  if (c->send_pending) return true;
  if (c->out_off == c->out.size()) {
    c->out.clear();
    c->out_off = 0;
    if (c->out_next.empty()) return true;
    c->out.swap(c->out_next);
  }
  if (!loop.send(&c->send_op, c->file(), c->out.data() + c->out_off, c->out.size() - c->out_off)) {
    return false;
  }
  c->send_pending = true;
  return true;
}

bool Impl::post_recv(Connection* c) {
  if (c->recv_pending) return true;
  const bool ok = rx_ring ? loop.recv_multishot(&c->recv_op, c->file(), rx_ring->group())
                          : loop.recv(&c->recv_op, c->file(), c->rbuf.get(), c->buf_bytes);
  if (!ok) return false;
  c->recv_pending = true;
  return true;
}

// SPEC R11: POST, Host, Content-Type, Content-Length, User-Agent, the signature profile,
// the payload byte for byte. No Expect, no Accept-Encoding.
void Impl::write_request(Connection* c) {
  Exchange* ex = c->ex;
  const SendRequest& rq = ex->op->request;
  const Url& u = ex->url;
  ex->phase = Phase::kWriting;
  ex->t_write = loop.now();
  c->parser.reset();
  c->got_first_byte = false;
  c->extra_bytes = false;
  c->response_done_early = false;

  std::string& buf = c->tls ? req_scratch : send_buffer(c);
  if (c->tls) buf.clear();
  buf.append(rq.status_check ? "GET " : "POST ")
      .append(u.path_and_query)
      .append(" HTTP/1.1\r\nHost: ");
  const bool v6 = u.host.find(':') != std::string::npos;
  if (v6) buf.push_back('[');
  buf.append(u.host);
  if (v6) buf.push_back(']');
  if (u.port != (u.tls ? 443 : 80)) {
    buf.push_back(':');
    append_uint(buf, u.port);
  }
  buf.append("\r\nUser-Agent: ").append(opt.user_agent);
  if (rq.status_check) {
    buf.append("\r\n");  // a GET: no body, no Content-Type, no Content-Length
  } else {
    buf.append("\r\nContent-Type: application/json\r\nContent-Length: ");
    append_uint(buf, rq.body.size());
    buf.append("\r\n");
  }
  SignInput sign;
  sign.profile = rq.profile;
  sign.message_id = rq.message_id;
  sign.attempt = rq.attempt;
  sign.timestamp_s = loop.wall_now().ns() / 1'000'000'000;  // fresh per attempt (R11.3)
  sign.body = rq.body;
  sign.secrets = &rq.secrets;
  append_signature_headers(sign, buf);
  buf.append(rq.extra_headers);  // the endpoint's own, after ringcast's (operations.md "Endpoints")
  buf.append("\r\n").append(rq.body);
  if (c->tls) {
    if (c->tls->write(buf.data(), buf.size()) != TlsStream::Status::kOk) {
      fail_conn(c, ErrorCode::network(EPROTO));
      return;
    }
    c->tls->take_output(send_buffer(c));
  }
  if (!kick_send(c)) fail_conn(c, ErrorCode::network(ENOBUFS));
}

void Impl::on_send(Connection* c, int res) {
  if (res < 0) {
    fail_conn(c, ErrorCode::network(-res));
    return;
  }
  c->out_off += static_cast<size_t>(res);
  if (!kick_send(c)) {
    fail_conn(c, ErrorCode::network(ENOBUFS));
    return;
  }
  Exchange* ex = c->ex;
  if (ex != nullptr && ex->phase == Phase::kWriting && c->flushed()) {
    ex->op->result.request_written = true;  // every request byte reached the socket
    ex->phase = Phase::kReading;
    if (c->response_done_early) response_done(c);
  }
}

void Impl::on_recv(Connection* c, int res, const char* data) {
  if (res == -EINTR || res == -EAGAIN || res == -ENOBUFS) {
    if (!post_recv(c)) fail_conn(c, ErrorCode::network(ENOBUFS));
    return;
  }
  if (res <= 0) {
    on_eof(c, res);
    return;
  }
  const size_t n = static_cast<size_t>(res);
  switch (c->state) {
    case ConnState::kIdle:
      if (!c->tls) {  // unsolicited bytes on an idle connection: not reusable
        st.idle_closed_by_peer++;
        close_conn(c);
        return;
      }
      [[fallthrough]];
    case ConnState::kHandshaking:
    case ConnState::kActive:
      break;
    default:
      close_conn(c);
      return;
  }
  if (c->tls) {
    c->tls->feed(data, n);
    if (c->state == ConnState::kHandshaking) {
      drive_handshake(c);
      if (c->state != ConnState::kActive) {
        if (c->state != ConnState::kClosing && !post_recv(c)) {
          fail_conn(c, ErrorCode::network(ENOBUFS));
        }
        return;
      }
    }
    for (;;) {
      TlsStream::Status s;
      const size_t got = c->tls->read(plain_scratch.get(), plain_scratch_bytes, &s);
      // Post-handshake messages (session tickets) may need a reply... BoringSSL writes none
      // for a client, but flush defensively.
      if (c->tls->pending_output() > 0) {
        c->tls->take_output(send_buffer(c));
        if (!kick_send(c)) {
          fail_conn(c, ErrorCode::network(ENOBUFS));
          return;
        }
      }
      if (got > 0) {
        if (c->state == ConnState::kIdle) {
          st.idle_closed_by_peer++;
          close_conn(c);
          return;
        }
        on_plain(c, plain_scratch.get(), got);
        if (c->state == ConnState::kClosing) break;
        continue;  // keep reading: a ticket may follow the response in the same read
      }
      if (s == TlsStream::Status::kWantRead) break;
      if (s == TlsStream::Status::kClosed) {
        on_eof(c, 0);
        return;
      }
      fail_conn(c, ErrorCode::network(EPROTO));
      return;
    }
    if (c->host->tls_probe == c && c->tls->got_session()) end_probe(c->host);
  } else {
    on_plain(c, data, n);
  }
  if (c->state != ConnState::kClosing && !post_recv(c)) {
    fail_conn(c, ErrorCode::network(ENOBUFS));
  }
}

void Impl::on_plain(Connection* c, const char* data, size_t n) {
  Exchange* ex = c->ex;
  if (ex == nullptr || c->response_done_early) {  // bytes nobody asked for
    close_conn(c);
    return;
  }
  if (!c->got_first_byte) {
    c->got_first_byte = true;
    ex->op->result.timings.first_byte = loop.now() - ex->t_write;
  }
  size_t consumed = 0;
  switch (c->parser.feed(data, n, &consumed)) {
    case ResponseParser::State::kNeedMore:
      return;
    case ResponseParser::State::kDone:
      c->extra_bytes = consumed < n;
      if (ex->phase == Phase::kWriting) {
        // The receiver answered before our write completed (e.g. 413 mid-body): wait for the
        // send completion so request_written is known, then finish.
        c->response_done_early = true;
        return;
      }
      response_done(c);
      return;
    case ResponseParser::State::kError:
      fail_conn(c, ErrorCode::network(c->parser.error_errno()));
      return;
  }
}

void Impl::on_eof(Connection* c, int res) {
  c->eof = true;
  Exchange* ex = c->ex;
  switch (c->state) {
    case ConnState::kIdle:
      st.idle_closed_by_peer++;  // detected before any request used it
      close_conn(c);
      return;
    case ConnState::kHandshaking:
      fail_conn(c, ErrorCode::of(K::kTlsHandshake));
      return;
    case ConnState::kActive:
      break;
    default:
      close_conn(c);
      return;
  }
  if (ex == nullptr) {
    close_conn(c);
    return;
  }
  if (c->parser.finish_eof() == ResponseParser::State::kDone) {
    if (ex->phase == Phase::kWriting) {
      c->response_done_early = true;
      return;  // on_send finishes it (the send fails or completes soon)
    }
    response_done(c);
    return;
  }
  fail_conn(c, ErrorCode::network(res < 0 ? -res : ECONNRESET));
}

void Impl::response_done(Connection* c) {
  Exchange* ex = c->ex;
  TransportResult& r = ex->op->result;
  const ResponseParser& p = c->parser;
  r.response_received = true;
  r.http_status = static_cast<uint16_t>(p.status());
  r.code = ErrorCode::none();
  r.retry_after = p.retry_after();
  r.body_prefix = p.body_prefix();
  Host* h = c->host;
  if (c->tls) {
    // Records already received behind the response: application data there is unsolicited
    // (the connection must not carry it into the next exchange); tickets are fine.
    char drain[2048];
    for (;;) {
      TlsStream::Status s;
      if (c->tls->read(drain, sizeof(drain), &s) > 0) {
        c->extra_bytes = true;
        continue;
      }
      if (s != TlsStream::Status::kWantRead) c->eof = true;  // close_notify or a bad record
      break;
    }
  }
  // Reuse only after a complete response on a clean connection.
  const bool reusable =
      p.keep_alive() && !p.body_capped() && !c->extra_bytes && !c->eof && c->flushed();
  c->ex = nullptr;
  ex->conn = nullptr;
  if (h->tls_probe == c && !c->tls->got_session()) end_probe(h);  // no ticket: stop waiting
  if (reusable) {
    make_idle(c);
  } else {
    close_conn(c);
  }
  schedule_pump(h);
  finish(ex);
}

}  // namespace ringcast::net
