#!/usr/bin/python3
"""A local SMTP sink for ringcast's tests (tests/support/smtp_sink.h): Debian's aiosmtpd on
127.0.0.1, every message written to --dir as <n>.eml (the data as received, dot-unstuffed) and
<n>.env (envelope, TLS, AUTH, the answer given), the .env written last (atomically) as the marker.
Options: STARTTLS with a certificate, AUTH required (PLAIN/LOGIN with one user), and failing the
next N messages with 451 (transient) or 550 (permanent) at the end of DATA; a file <dir>/control
("451 3", "550 1" or "0 0") read before each answer replaces the failure count at run time.
Prints "listening on 127.0.0.1:<port>" once it accepts connections."""

import argparse
import asyncio
import os
import ssl
import sys

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--require-starttls", action="store_true")
    p.add_argument("--auth-user")
    p.add_argument("--auth-password")
    p.add_argument("--auth-mechanisms", default="PLAIN,LOGIN")
    p.add_argument("--auth-allow-clear", action="store_true")
    p.add_argument("--fail-code", type=int, default=0)
    p.add_argument("--fail-count", type=int, default=0)
    return p.parse_args()


class Handler:
    def __init__(self, args):
        self.args = args
        # A restart on the same dir goes on counting after the messages already there.
        self.n = len([f for f in os.listdir(args.dir) if f.endswith(".env")])
        self.fail_code = args.fail_code
        self.fail_left = args.fail_count

    def read_control(self):
        path = os.path.join(self.args.dir, "control")
        try:
            with open(path) as f:
                code, count = f.read().split()
            os.unlink(path)
            self.fail_code, self.fail_left = int(code), int(count)
        except FileNotFoundError:
            pass

    def write(self, name, data):
        tmp = os.path.join(self.args.dir, "." + name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.rename(tmp, os.path.join(self.args.dir, name))

    async def handle_DATA(self, server, session, envelope):
        self.read_control()
        self.n += 1
        answer = "250 2.0.0 OK: queued"
        if self.fail_left > 0 and self.fail_code in (451, 550):
            self.fail_left -= 1
            answer = ("451 4.3.0 try again later" if self.fail_code == 451
                      else "550 5.7.1 rejected for good")
        auth = "-"
        if session.authenticated and isinstance(session.auth_data, LoginPassword):
            auth = session.auth_data.login.decode("utf-8", "replace")
        env = "mail_from=%s\nrcpt_to=%s\ntls=%s\nauth=%s\nresult=%s\n" % (
            envelope.mail_from, ",".join(envelope.rcpt_tos),
            "yes" if session.ssl is not None else "no", auth, answer[:3])
        name = "%04d" % self.n
        content = envelope.content if isinstance(envelope.content, bytes) else \
            envelope.content.encode("utf-8")
        self.write(name + ".eml", content)
        self.write(name + ".env", env.encode())
        return answer


def main():
    args = parse_args()
    handler = Handler(args)
    tls_context = None
    if args.tls_cert:
        tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls_context.load_cert_chain(args.tls_cert, args.tls_key)

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = (isinstance(auth_data, LoginPassword) and args.auth_user is not None and
              auth_data.login == args.auth_user.encode() and
              auth_data.password == (args.auth_password or "").encode())
        # handled=False: smtp_AUTH answers 535 itself; auth_data: the session's login.
        return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)

    mechanisms = {m.strip().upper() for m in args.auth_mechanisms.split(",") if m.strip()}
    exclude = [m for m in ("PLAIN", "LOGIN") if m not in mechanisms]

    def factory():
        kw = dict(hostname="sink.test", decode_data=False, tls_context=tls_context,
                  require_starttls=args.require_starttls)
        if args.auth_user is not None:
            kw.update(authenticator=authenticator, auth_required=True,
                      auth_require_tls=not args.auth_allow_clear,
                      auth_exclude_mechanism=exclude)
        return SMTP(handler, **kw)

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = loop.run_until_complete(
        loop.create_server(factory, host="127.0.0.1", port=args.port, reuse_address=True))
    port = server.sockets[0].getsockname()[1]
    print("listening on 127.0.0.1:%d" % port, flush=True)
    try:
        loop.run_forever()
    finally:
        server.close()


if __name__ == "__main__":
    sys.exit(main())
