// NKEY authentication for NATS (docs/operations.md §6 "NATS JetStream"): a user's ed25519 key
// pair from its seed ("SU…": base32 of two prefix bytes, the 32-byte seed and a CRC-16), its
// public key ("U…") that CONNECT names, and the signature of the server's INFO nonce that proves
// the client holds the seed. Invariant: the private key never leaves this value (nothing here
// prints or logs it).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace ringcast::nats {

struct NkeyUser {
  std::string public_key;                 // "U…"
  std::array<uint8_t, 64> private_key{};  // ed25519, from the seed
};

// kInvalidArgument (field "nkey_seed") for anything but a user seed with a valid checksum.
// Surrounding white space (a seed file's newline) is ignored.
Result<NkeyUser> nkey_from_seed(std::string_view seed);
// The CONNECT "sig": the ed25519 signature of `nonce`, base64url without padding.
std::string nkey_sign(const NkeyUser& user, std::string_view nonce);
// The seed text of a user key made from 32 random bytes (tests and tooling).
std::string nkey_user_seed(const std::array<uint8_t, 32>& raw);

}  // namespace ringcast::nats
