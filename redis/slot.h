// Redis Cluster key slots: CRC16-CCITT (XMODEM: polynomial 0x1021, init 0, no
// reflection) of the key's hash tag, mod 16384, exactly as the server computes CLUSTER KEYSLOT.
// Invariant: the hash tag is the part between the first '{' and the first '}' after it, when
// that part is not empty; otherwise the whole key is hashed ("{}" and "foo{}{bar}" hash whole).
#pragma once

#include <cstdint>
#include <string_view>

namespace ringcast::redis {

inline constexpr uint16_t kSlots = 16384;

uint16_t crc16(std::string_view data);
std::string_view hash_tag(std::string_view key);  // the part that is hashed
uint16_t key_slot(std::string_view key);

}  // namespace ringcast::redis
