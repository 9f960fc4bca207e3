#include "base/crc32c.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/quote.h"

namespace foundry {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // 0x1EDC6F41 bit-reversed

// tables[0] is the byte-at-a-time table; tables[k][b] is b's CRC followed by k zero bytes, so
// eight bytes are folded with eight lookups ("slicing by 8").
using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPolynomial : 0);
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b)
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  return t;
}

const Tables& CrcTables() {
  static const Tables tables = MakeTables();
  return tables;
}

}  // namespace

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
  const Tables& t = CrcTables();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian: the first byte is the low one
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xFF];
  return ~c;
}

StatusOr<FileChecksum> ChecksumFile(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return Error("cannot open " + QuoteName(path) + ": " + std::strerror(errno));
  constexpr size_t kBlock = 1 << 20;
  std::unique_ptr<char[]> buf(new char[kBlock]);
  FileChecksum sum;
  for (;;) {
    const size_t n = std::fread(buf.get(), 1, kBlock, f.get());
    sum.crc32c = Crc32c(sum.crc32c, buf.get(), n);
    sum.bytes += static_cast<int64_t>(n);
    if (n < kBlock) break;
  }
  if (std::ferror(f.get())) return Error("cannot read " + QuoteName(path) + ": " + std::strerror(errno));
  return sum;
}

}  // namespace foundry
