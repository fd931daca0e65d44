// Fuzz target: api/forward_auth, the check of a call another node forwarded (SPEC R14.4): the
// principal and signature headers arrive from the network. Whatever the input: no crash; only
// the exact signature sign() makes for those parts is accepted, and only once; an accepted
// principal is one that encode_principal() writes back to the same text.
#include <string>

#include "api/forward_auth.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace ringcast;
using namespace ringcast::api;

constexpr const char* kSecret = "fuzz-cluster-secret-0123456789abcdef";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const WallTime now = WallTime::from_ms(1'800'000'000'000 + static_cast<int64_t>(in.u8()) * 1000);
  const std::string origin(in.bytes(in.u8() % 16));
  const std::string method(in.bytes(in.u8() % 8));
  const std::string target(in.bytes(in.u8() % 64));
  const std::string principal(in.bytes(in.u8()));
  const std::string signature(in.bytes(in.u8()));
  const std::string body(in.rest());
  ForwardAuth auth(kSecret, seconds(30), 8);

  Principal got;
  const ForwardVerdict v =
      auth.verify_parts(origin, method, target, body, principal, signature, now, got);
  if (v == ForwardVerdict::kOk) {
    // Accepted: the principal is in its one form, and the call is not accepted again.
    FUZZ_CHECK(encode_principal(got) == principal);
    Principal again;
    FUZZ_CHECK(auth.verify_parts(origin, method, target, body, principal, signature, now, again) ==
               ForwardVerdict::kReplayed);
  }
  // A principal that decodes, signed here, is accepted with the same principal; any one-byte
  // change of the body is not.
  Principal p;
  if (decode_principal(principal, p)) {
    FUZZ_CHECK(encode_principal(p) == principal);
    const SignedHeaders h = auth.sign(p, origin, method, target, body, now);
    Principal back;
    FUZZ_CHECK(auth.verify_parts(origin, method, target, body, h.principal, h.signature, now,
                                 back) == ForwardVerdict::kOk);
    FUZZ_CHECK(back.kind == p.kind && back.tenant == p.tenant && back.key_id == p.key_id &&
               back.read_only == p.read_only);
    std::string changed = body;
    changed.push_back('x');
    FUZZ_CHECK(auth.verify_parts(origin, method, target, changed, h.principal, h.signature, now,
                                 back) != ForwardVerdict::kOk);
  }
  return 0;
}
