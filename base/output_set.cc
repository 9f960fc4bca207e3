#include "base/output_set.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/file_util.h"
#include "base/folder_lock.h"
#include "base/quote.h"

namespace foundry {

namespace fs = std::filesystem;

namespace {

std::string Why(int err) { return std::strerror(err); }

// `inner` is `outer` or lies below it (both canonical).
bool Within(const std::string& inner, const std::string& outer) {
  if (inner == outer) return true;
  const std::string dir = outer.back() == '/' ? outer : outer + "/";
  return inner.compare(0, dir.size(), dir) == 0;
}

std::string Canonical(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) p = fs::absolute(path, ec).lexically_normal();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::string ParentOf(const std::string& path) {
  std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

bool IsDirect(mode_t mode) { return S_ISCHR(mode) || S_ISFIFO(mode); }

// The descriptor a standard stream's name stands for (-1: none). Such a name is written through
// the descriptor itself: renaming over /dev/stdout would replace the link in /dev, and opening it
// again would write from another offset than the tool's own output.
int StdStreamFd(const std::string& path) {
  for (int fd : {1, 2}) {
    const std::string n = std::to_string(fd);
    if (path == (fd == 1 ? "/dev/stdout" : "/dev/stderr") || path == "/dev/fd/" + n ||
        path == "/proc/self/fd/" + n)
      return fd;
  }
  return -1;
}

bool InSystemFolder(const std::string& canonical) {
  return canonical.rfind("/dev/", 0) == 0 || canonical.rfind("/proc/", 0) == 0 ||
         canonical.rfind("/sys/", 0) == 0;
}

// Writes all of `bytes` to the character device or FIFO at `path`. A FIFO nobody reads is an
// error, not a hang (O_NONBLOCK open gives ENXIO), and the open never creates or truncates.
Status WriteDirect(const std::string& path, int std_fd, const std::string& option,
                   std::string_view bytes) {
  if (std_fd >= 0) std::fflush(nullptr);  // what the tool printed comes first
  int fd = std_fd >= 0 ? ::dup(std_fd)
                       : ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENXIO)
      return Error(option + " " + QuoteName(path) +
                   ": it is a named pipe that nobody reads; start its reader first, or give a "
                   "file");
    return Error(option + " " + QuoteName(path) + ": cannot write: " + Why(errno));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(fd);
      return Error(option + " " + QuoteName(path) + ": cannot write: " + Why(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && errno != EINTR)
    return Error(option + " " + QuoteName(path) + ": cannot write: " + Why(errno));
  return Status::Ok();
}

}  // namespace

std::vector<std::string> MissingFolders(const std::string& path) {
  std::vector<std::string> missing;
  std::error_code ec;
  for (fs::path d = fs::path(path); !d.empty(); d = d.parent_path()) {
    if (fs::exists(fs::symlink_status(d, ec)) || d == d.parent_path()) break;
    missing.insert(missing.begin(), d.string());
  }
  return missing;
}

const OutputSet::Entry* OutputSet::Find(const std::string& path) const {
  for (const Entry& e : outputs_)
    if (e.path == path) return &e;
  return nullptr;
}

OutputSet::Entry* OutputSet::Find(const std::string& path) {
  return const_cast<Entry*>(std::as_const(*this).Find(path));
}

Status OutputSet::AddInput(const std::string& path, const std::string& what) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return Status::Ok();
  Input in{path, what, Canonical(path), S_ISDIR(st.st_mode)};
  const std::optional<FileId> id = GetFileId(path);
  for (const Entry& e : outputs_)
    if (e.canonical == in.canonical || (id && GetFileId(e.path) == id) ||
        (in.folder && Within(e.canonical, in.canonical)))
      return Error(e.option + " " + QuoteName(e.path) + ": writing it would change " +
                   QuoteName(path) + ", " + what + "; choose another " +
                   (e.folder ? "folder" : "file"));
  inputs_.push_back(std::move(in));
  return Status::Ok();
}

Status OutputSet::Check(const std::string& path, const std::string& option, bool folder,
                        std::string& canonical) const {
  const std::string kind = folder ? "folder" : "file";
  const std::string named = option + " " + QuoteName(path);
  if (path.empty()) return Error(option + ": the name is empty; give a " + kind + " name");
  if (path.size() >= PATH_MAX)
    return Error(named + ": the path is " + std::to_string(path.size()) + " bytes, more than the " +
                 std::to_string(PATH_MAX - 1) + " a path may have; choose a shorter one");
  for (const fs::path& part : fs::path(path))
    if (part.string().size() > NAME_MAX)
      return Error(named + ": the name " + QuoteName(part.string()) + " is " +
                   std::to_string(part.string().size()) + " bytes, more than the " +
                   std::to_string(NAME_MAX) + " a file name may have; choose a shorter one");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (folder && !S_ISDIR(st.st_mode))
      return Error(named + ": it exists and is not a folder; choose a new folder");
    if (!folder && S_ISDIR(st.st_mode)) return Error(named + ": it is a folder; give a file name");
    if (!folder && !S_ISREG(st.st_mode) && !IsDirect(st.st_mode))
      return Error(named + ": it is neither a regular file nor a character device or pipe; " +
                   "give a file name");
  }
  const bool direct = ::stat(path.c_str(), &st) == 0 && !folder && IsDirect(st.st_mode);
  // The first folder above the target that exists: it must be one, and writable (a device or
  // pipe is opened where it is: its folder is not written).
  if (!direct) {
    std::string above = ParentOf(path);
    const std::vector<std::string> missing = MissingFolders(above);
    if (!missing.empty()) above = ParentOf(missing.front());
    if (::stat(above.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return Error(named + ": " + QuoteName(above) + " is not a folder; choose another " + kind);
    // access() says yes to root everywhere but read-only file systems; a folder made and removed
    // again is the real test (/proc takes none), before any work is done.
    if (::access(above.c_str(), W_OK | X_OK) != 0)
      return Error(named + ": cannot write in the folder " + QuoteName(above) + ": " + Why(errno));
    const std::string probe =
        (fs::path(above) / (".foundry-probe." + std::to_string(::getpid()))).string();
    if (::mkdir(probe.c_str(), 0700) != 0 && errno != EEXIST)
      return Error(named + ": cannot write in the folder " + QuoteName(above) + ": " + Why(errno));
    ::rmdir(probe.c_str());
  }
  canonical = Canonical(path);
  const std::optional<FileId> id = GetFileId(path);
  for (const Input& in : inputs_)
    if (in.canonical == canonical || (id && GetFileId(in.path) == id) ||
        (in.folder && Within(canonical, in.canonical)))
      return Error(named + ": writing it would change " + QuoteName(in.path) + ", " + in.what +
                   "; choose another " + kind);
  for (const Entry& e : outputs_) {
    if (direct && e.direct) continue;  // two reports into /dev/null are both written
    if (e.canonical == canonical || (id && GetFileId(e.path) == id))
      return Error(named + " is also the output of " + e.option + " " + QuoteName(e.path) +
                   "; give each output its own name");
    if ((e.folder && Within(canonical, e.canonical)) || (folder && Within(e.canonical, canonical)))
      return Error(named + " and " + e.option + " " + QuoteName(e.path) +
                   " overlap (one is inside the other folder); give each output its own place");
  }
  return Status::Ok();
}

Status OutputSet::AddFile(const std::string& path, const std::string& option, FileOptions options) {
  Entry e{path, option, path};
  e.make_parents = options.make_parents;
  const std::string device = ": it is a device or a named pipe; give the name of a regular file";
  if ((e.fd = StdStreamFd(path)) >= 0) {
    if (!options.special) return Error(option + " " + QuoteName(path) + device);
    e.direct = true;
    outputs_.push_back(std::move(e));
    return Status::Ok();
  }
  RETURN_IF_ERROR(Check(path, option, /*folder=*/false, e.canonical));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && IsDirect(st.st_mode)) {
    if (!options.special) return Error(option + " " + QuoteName(path) + device);
    e.direct = true;
  } else if (InSystemFolder(e.canonical)) {
    return Error(option + " " + QuoteName(path) + ": it is in " +
                 e.canonical.substr(0, e.canonical.find('/', 1) + 1) +
                 ", where foundry writes only to devices and pipes; give a file elsewhere");
  } else if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    e.target = e.canonical;  // the file the link names is replaced; the link stays
  }
  if (!e.make_parents && !MissingFolders(ParentOf(path)).empty())
    return Error(option + " " + QuoteName(path) + ": the folder " + QuoteName(ParentOf(path)) +
                 " does not exist; create it first");
  outputs_.push_back(std::move(e));
  return Status::Ok();
}

Status OutputSet::AddFolder(const std::string& path, const std::string& option) {
  Entry e{path, option, path};
  e.folder = true;
  e.make_parents = true;
  RETURN_IF_ERROR(Check(path, option, /*folder=*/true, e.canonical));
  outputs_.push_back(std::move(e));
  return Status::Ok();
}

StatusOr<std::string> OutputSet::StagingFolder(const std::string& target_dir, const Entry& e) {
  for (const auto& [dir, tmp] : staging_)
    if (dir == target_dir) return tmp;
  std::error_code ec;
  for (const std::string& d : MissingFolders(target_dir)) {
    if (!e.make_parents)
      return Error(e.option + " " + QuoteName(e.path) + ": the folder " + QuoteName(target_dir) +
                   " does not exist; create it first");
    if (!fs::create_directory(d, ec) && !fs::is_directory(d, ec))
      return Error(e.option + " " + QuoteName(e.path) + ": cannot create the folder " +
                   QuoteName(d) + ": " + (ec ? ec.message() : std::string("a file is in the way")));
    made_folders_.push_back(d);
  }
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string tmp = (fs::path(target_dir) / (".foundry-tmp." + std::to_string(::getpid()) +
                                                     "." + std::to_string(counter++)))
                                .string();
    if (::mkdir(tmp.c_str(), 0777) == 0) {
      staging_.emplace_back(target_dir, tmp);
      const int fd = ::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
        staging_locks_.push_back(fd);
      } else if (fd >= 0) {
        ::close(fd);
      }
      return tmp;
    }
    if (errno != EEXIST)
      return Error(e.option + " " + QuoteName(e.path) + ": cannot write in the folder " +
                   QuoteName(target_dir) + ": " + Why(errno));
  }
  return Error(e.option + " " + QuoteName(e.path) + ": cannot make a temporary folder in " +
               QuoteName(target_dir));
}

StatusOr<std::string> OutputSet::Stage(const std::string& path) {
  Entry* e = Find(path);
  if (!e) return Error("internal: '" + path + "' was not declared as an output");
  if (e->direct)
    return Error(e->option + " " + QuoteName(path) + ": a device or pipe takes bytes, not a file");
  if (!e->staged.empty()) return e->staged;
  ASSIGN_OR_RETURN(std::string tmp, StagingFolder(ParentOf(e->target), *e));
  e->staged = (fs::path(tmp) / fs::path(e->target).filename()).string();
  if (e->folder && ::mkdir(e->staged.c_str(), 0777) != 0)
    return Error(e->option + " " + QuoteName(path) + ": cannot create " + QuoteName(e->staged) +
                 ": " + Why(errno));
  return e->staged;
}

Status OutputSet::Write(const std::string& path, std::string_view bytes) {
  Entry* e = Find(path);
  if (e && e->direct) {
    e->bytes.assign(bytes);
    e->staged_direct = true;
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(std::string staged, Stage(path));
  Status st = WriteFileAtomic(staged, bytes);
  if (!st.ok()) return Error(e->option + " " + QuoteName(path) + ": " + st.message());
  return Status::Ok();
}

Status OutputSet::Write(const std::string& path, const std::function<bool(std::FILE*)>& write) {
  Entry* e = Find(path);
  if (e && e->direct) {
    char* buf = nullptr;
    size_t size = 0;
    std::FILE* f = ::open_memstream(&buf, &size);
    if (!f) return Error(e->option + " " + QuoteName(path) + ": out of memory");
    const bool ok = write(f);
    std::fclose(f);
    e->bytes.assign(buf, size);
    std::free(buf);
    if (!ok) return Error(e->option + " " + QuoteName(path) + ": cannot write");
    e->staged_direct = true;
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(std::string staged, Stage(path));
  Status st = WriteFileAtomic(staged, write);
  if (!st.ok()) return Error(e->option + " " + QuoteName(path) + ": " + st.message());
  return Status::Ok();
}

Status OutputSet::Commit() {
  // 3a. Locks on the target folders, in one order, so two commands cannot deadlock.
  std::vector<std::string> dirs;
  for (const auto& [dir, tmp] : staging_) dirs.push_back(Canonical(dir));
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  std::vector<int> locks;
  auto unlock = [&] {
    for (int fd : locks) ::close(fd);  // closing releases the flock
    locks.clear();
  };
  for (const std::string& d : dirs) {
    int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) {
      int err = errno;
      if (fd >= 0) ::close(fd);
      unlock();
      Abort();
      return Error("cannot lock the folder " + QuoteName(d) + " to write into it: " + Why(err));
    }
    locks.push_back(fd);
  }
  auto fail = [&](const Status& st) {
    unlock();
    Abort();
    return st;
  };
  // 3b. Direct outputs: they cannot be taken back, so before any rename.
  for (const Entry& e : outputs_)
    if (e.direct && e.staged_direct)
      if (Status st = WriteDirect(e.path, e.fd, e.option, e.bytes); !st.ok()) return fail(st);

  // 3c. Renames, each undoable until the last is done.
  struct Move {
    const Entry* e;
    std::string old;  // "" when nothing was there
    bool exchanged = false;
  };
  std::vector<Move> done;
  // A test's way to widen the window between two renames (tests/tools/outputs_test.cc: two
  // commands writing one prefix at once); never set in use.
  const char* delay_env = std::getenv("FOUNDRY_COMMIT_DELAY_MS");
  const long delay_ms = delay_env ? std::clamp(std::strtol(delay_env, nullptr, 10), 0L, 10000L) : 0;
  auto undo = [&] {
    for (auto it = done.rbegin(); it != done.rend(); ++it) {
      const std::string& target = it->e->target;
      if (it->exchanged) {
#ifdef RENAME_EXCHANGE
        renameat2(AT_FDCWD, it->e->staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE);
#endif
      } else if (it->e->folder && !it->old.empty()) {
        std::rename(target.c_str(), it->e->staged.c_str());
        std::rename(it->old.c_str(), target.c_str());
      } else if (!it->old.empty()) {
        std::rename(it->old.c_str(), target.c_str());
      } else if (it->e->folder) {
        std::rename(target.c_str(), it->e->staged.c_str());
      } else {
        std::remove(target.c_str());
      }
    }
  };
  for (const Entry& e : outputs_) {
    if (e.direct || e.staged.empty()) continue;
    struct stat st {};
    if (::lstat(e.staged.c_str(), &st) != 0) continue;  // staged but never written (a .data)
    Move m{&e};
    const bool exists = ::lstat(e.target.c_str(), &st) == 0;
    if (e.folder && exists) {
#ifdef RENAME_EXCHANGE
      if (renameat2(AT_FDCWD, e.staged.c_str(), AT_FDCWD, e.target.c_str(), RENAME_EXCHANGE) == 0) {
        m.exchanged = true;
        done.push_back(m);
        continue;
      }
#endif
      m.old = e.staged + ".foundry-old";
      if (std::rename(e.target.c_str(), m.old.c_str()) != 0) {
        int err = errno;
        undo();
        return fail(Error(e.option + " " + QuoteName(e.path) + ": cannot replace it: " + Why(err) +
                          "; nothing was written"));
      }
    } else if (exists && !S_ISDIR(st.st_mode)) {
      // The file being replaced stays reachable until every output is in.
      m.old = e.staged + ".foundry-old";
      if (::link(e.target.c_str(), m.old.c_str()) != 0) {
        int err = errno;
        undo();
        return fail(Error(e.option + " " + QuoteName(e.path) + ": cannot keep the old file (" +
                          Why(err) + "); nothing was written"));
      }
    }
    if (!done.empty() && delay_ms > 0) ::usleep(static_cast<useconds_t>(delay_ms) * 1000);
    if (std::rename(e.staged.c_str(), e.target.c_str()) != 0) {
      int err = errno;
      if (e.folder && !m.old.empty()) std::rename(m.old.c_str(), e.target.c_str());
      undo();
      return fail(Error(e.option + " " + QuoteName(e.path) + ": cannot write it: " + Why(err) +
                        "; nothing was written"));
    }
    done.push_back(m);
  }
  // 4. What is left in the temp folders are the replaced files.
  std::error_code ec;
  for (const auto& [dir, tmp] : staging_) fs::remove_all(tmp, ec);
  staging_.clear();
  ReleaseStagingLocks();
  made_folders_.clear();
  unlock();
  return Status::Ok();
}

void OutputSet::Abort() {
  std::error_code ec;
  for (const auto& [dir, tmp] : staging_) fs::remove_all(tmp, ec);
  staging_.clear();
  ReleaseStagingLocks();
  for (auto it = made_folders_.rbegin(); it != made_folders_.rend(); ++it) fs::remove(*it, ec);
  made_folders_.clear();
  for (Entry& e : outputs_) {
    e.staged.clear();
    e.staged_direct = false;
    e.bytes.clear();
  }
}

void OutputSet::ReleaseStagingLocks() {
  for (int fd : staging_locks_) ::close(fd);
  staging_locks_.clear();
}

std::vector<std::string> RemoveStagingDebris(const std::string& folder,
                                             std::optional<fs::file_time_type> stale_before) {
  std::vector<std::string> lines;
  std::error_code ec;
  const std::string prefix = ".foundry-tmp.";
  const std::string probe = ".foundry-probe.";  // the write test of an output's folder
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code entry_ec;
    if (name.rfind(probe, 0) == 0 && e.is_directory(entry_ec)) {
      // Empty, made and removed at once: left only by a process killed in between.
      const long pid = std::strtol(name.c_str() + probe.size(), nullptr, 10);
      if ((pid == ::getpid() || !ProcessIsAlive(pid)) && ::rmdir(e.path().c_str()) == 0)
        lines.push_back(QuoteName(e.path().string()) + " (pid " + std::to_string(pid) +
                        ", not running)");
      continue;
    }
    if (name.rfind(prefix, 0) != 0 || !e.is_directory(entry_ec)) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    const bool owned = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
    std::string why;
    if (!owned && (pid == ::getpid() || !ProcessIsAlive(pid)))
      why = "pid " + std::to_string(pid) + ", not running";
    else if (!owned && stale_before && e.last_write_time(entry_ec) < *stale_before && !entry_ec)
      why = "older than the newest complete save";
    if (!why.empty()) {
      fs::remove_all(e.path(), entry_ec);
      lines.push_back(entry_ec ? "cannot remove " + QuoteName(e.path().string()) + ": " +
                                     entry_ec.message()
                               : QuoteName(e.path().string()) + " (" + why + ")");
    }
    ::close(fd);
  }
  return lines;
}

}  // namespace foundry
