#include "base/file_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "base/quote.h"

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

std::variant<std::string, ReadFileError> ReadRegularFile(const std::string& path,
                                                         int64_t max_bytes) {
  using Kind = ReadFileError::Kind;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ReadFileError{Kind::kCannotStat, errno};
  if (S_ISDIR(st.st_mode)) return ReadFileError{Kind::kFolder};
  if (!S_ISREG(st.st_mode)) return ReadFileError{Kind::kNotRegular};
  if (max_bytes >= 0 && st.st_size > max_bytes)
    return ReadFileError{Kind::kTooLarge, 0, static_cast<int64_t>(st.st_size)};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return ReadFileError{Kind::kCannotOpen, errno};
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    size_t n = std::fread(buf, 1, sizeof buf, f);
    bytes.append(buf, n);
    if (n < sizeof buf) break;
  }
  bool failed = std::ferror(f) != 0;
  int err = errno;
  std::fclose(f);
  if (failed) return ReadFileError{Kind::kCannotRead, err};
  return bytes;
}

StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) {
  auto read = ReadRegularFile(path, max_bytes);
  const ReadFileError* e = std::get_if<ReadFileError>(&read);
  if (!e) return std::get<std::string>(std::move(read));
  using Kind = ReadFileError::Kind;
  const std::string name = QuoteName(path);
  switch (e->kind) {
    case Kind::kCannotStat:
    case Kind::kCannotOpen:
      return Error("cannot open " + name + ": " + std::strerror(e->error_number));
    case Kind::kFolder:
      return Error("cannot read " + name + ": it is a directory");
    case Kind::kNotRegular:
      return Error("cannot read " + name +
                   ": not a regular file (a device, FIFO or socket); pass a file");
    case Kind::kTooLarge:
      return Error(name + " is " + std::to_string(e->size) + " bytes, more than the " +
                   std::to_string(max_bytes) + " this reader accepts");
    case Kind::kCannotRead:
      break;
  }
  return Error("cannot read " + name + ": " + std::strerror(e->error_number));
}

std::optional<FileId> GetFileId(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

}  // namespace foundry
