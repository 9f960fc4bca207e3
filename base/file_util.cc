#include "base/file_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace foundry {

Status WriteFileAtomic(const std::string& path, const std::function<bool(std::FILE*)>& write) {
  // O_EXCL with a per-call name, not path + pid alone: two writers in one process, or a stale
  // temp file from a killed run, never share a temp file. Mode 0666 & ~umask, as fopen gives.
  static std::atomic<uint64_t> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return Error("cannot write '" + path + "': " + std::strerror(errno));
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    int err = errno;
    ::close(fd);
    std::remove(tmp.c_str());
    return Error("cannot write '" + path + "': " + std::strerror(err));
  }
  errno = 0;
  bool ok = write(f);
  int err = errno;
  if (std::fflush(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    return Error("cannot write '" + path + "': " + std::strerror(err ? err : EIO));
  }
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view bytes) {
  return WriteFileAtomic(path, [&](std::FILE* f) {
    return std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  });
}

std::optional<FileId> GetFileId(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

}  // namespace foundry
