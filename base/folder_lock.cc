#include "base/folder_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "base/quote.h"

namespace foundry {

namespace fs = std::filesystem;

namespace {

// The pid a lock file holds (0: none readable).
long ReadPid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::strtol(buf, nullptr, 10) : 0;
}

// The lock file at `path` is still the one `fd` has open (not removed, nor replaced).
bool StillNamed(int fd, const std::string& path) {
  struct stat held {}, named {};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

}  // namespace

bool ProcessIsAlive(long pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH); }

StatusOr<FolderLock> FolderLock::Take(const std::string& folder, const std::string& option) {
  const std::string named = option + " " + QuoteName(folder);
  FolderLock lock;
  std::error_code ec;
  for (fs::path d = fs::path(folder); !d.empty() && !fs::exists(fs::symlink_status(d, ec));
       d = d.parent_path()) {
    lock.made_.insert(lock.made_.begin(), d.string());
    if (d == d.parent_path()) break;
  }
  fs::create_directories(folder, ec);
  if (!fs::is_directory(folder, ec))
    return Error(named + ": cannot create the folder" + (ec ? ": " + ec.message() : std::string()));
  lock.path_ = (fs::path(folder) / ".foundry-lock").string();
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return Error(named + ": cannot create its lock file " + QuoteName(lock.path_) + ": " +
                   std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const long holder = ReadPid(fd);
      ::close(fd);
      if (err != EWOULDBLOCK)
        return Error(named + ": cannot lock " + QuoteName(lock.path_) + ": " + std::strerror(err));
      return Error(named + ": another process" +
                   (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
                   " is writing into it; wait for it to end or choose another folder");
    }
    if (!StillNamed(fd, lock.path_)) {  // its owner removed it as we opened it: again
      ::close(fd);
      continue;
    }
    const long previous = ReadPid(fd);
    if (previous > 0 && previous != ::getpid())
      lock.note_ = "took over the lock of pid " + std::to_string(previous) + ", which " +
                   (ProcessIsAlive(previous) ? "no longer holds it" : "is no longer running");
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      const int err = errno;
      ::close(fd);
      return Error(named + ": cannot write " + QuoteName(lock.path_) + ": " + std::strerror(err));
    }
    lock.fd_ = fd;
    return lock;
  }
  return Error(named + ": its lock file " + QuoteName(lock.path_) +
               " keeps being replaced; is another program removing it?");
}

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    note_ = std::move(other.note_);
    made_ = std::move(other.made_);
  }
  return *this;
}

void FolderLock::Release() {
  if (fd_ < 0) return;
  // Removed while still held: whoever opened it meanwhile finds the name gone and starts over.
  if (StillNamed(fd_, path_)) ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) ::rmdir(it->c_str());  // when empty
  made_.clear();
}

}  // namespace foundry
