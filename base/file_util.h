// Files and directories written whole or not at all, and file identity for "is this output one of
// my inputs?".
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace foundry {

// Writes `path` atomically: the bytes go to a fresh temp file in the same directory (so the
// rename cannot cross file systems), which is renamed over `path` only once it is complete. A
// reader sees the old file or the new one; on failure the temp file is removed and `path` is
// untouched.
Status WriteFileAtomic(const std::string& path, std::string_view bytes);
// The same for a file too big to hold in memory: `write` streams into the temp file and returns
// false on a write error.
Status WriteFileAtomic(const std::string& path, const std::function<bool(std::FILE*)>& write);

// A file's identity (device, inode): two paths name the same file exactly when these are equal,
// whatever symlinks, hard links or "./" spellings lie between.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId&) const = default;
};
// nullopt when `path` does not exist (or cannot be stat'ed); symlinks are followed.
std::optional<FileId> GetFileId(const std::string& path);

}  // namespace foundry
