#include "redis/slot.h"

#include <array>

namespace ringcast::redis {
namespace {

constexpr std::array<uint16_t, 256> make_table() {
  std::array<uint16_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint16_t c = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      c = static_cast<uint16_t>((c & 0x8000) != 0 ? (c << 1) ^ 0x1021 : c << 1);
    }
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint16_t, 256> kTable = make_table();
static_assert(kTable[1] == 0x1021 && kTable[255] == 0x1ef0, "CRC16-CCITT table");

}  // namespace

uint16_t crc16(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char ch : data) {
    crc = static_cast<uint16_t>((crc << 8) ^ kTable[((crc >> 8) ^ ch) & 0xff]);
  }
  return crc;
}

std::string_view hash_tag(std::string_view key) {
  const size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

uint16_t key_slot(std::string_view key) {
  return crc16(hash_tag(key)) & (kSlots - 1);
}

}  // namespace ringcast::redis
