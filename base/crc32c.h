// CRC-32C (Castagnoli, the polynomial iSCSI, ext4 and Btrfs use), table-driven eight bytes at a
// time: the checksum of a checkpoint's files (runtime/checkpoint_manifest.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace foundry {

// The CRC-32C of `n` bytes following a previous value `crc` (0 to start): Crc32c(Crc32c(0, a), b)
// is the CRC of a followed by b. Crc32c(0, "123456789", 9) = 0xE3069283 (the standard check).
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// A file's size and CRC-32C, read in blocks (any size of file); an error names the file.
struct FileChecksum {
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};
StatusOr<FileChecksum> ChecksumFile(const std::string& path);

}  // namespace foundry
