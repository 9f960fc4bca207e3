// Files and directories written whole or not at all, files read whole (and only regular files),
// and file identity for "is this output one of my inputs?".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

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

// Why a whole-file read failed, for a caller that words the message itself (a config file is
// named by the option that gave it).
struct ReadFileError {
  enum class Kind {
    kCannotStat,  // it does not exist or cannot be looked at (error_number says why)
    kFolder,
    kNotRegular,  // a device, FIFO or socket
    kTooLarge,    // more than the reader's limit (size: the file's bytes)
    kCannotOpen,  // error_number says why
    kCannotRead,  // error_number says why
  };
  Kind kind = Kind::kCannotStat;
  int error_number = 0;
  int64_t size = 0;
};
// The bytes of `path`, a regular file of at most `max_bytes` (< 0: any size), or why not. Anything
// but a regular file, and one over the limit, is refused before it is opened: opening a FIFO
// waits for a writer, and /dev/zero never ends.
std::variant<std::string, ReadFileError> ReadRegularFile(const std::string& path,
                                                         int64_t max_bytes);
// The same, a failure worded as one line naming the file: `cannot open 'X': <strerror>`,
// `cannot read 'X': it is a directory`, ...
StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes = -1);

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
