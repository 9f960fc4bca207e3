// One writer per folder for the life of a command: an exclusive flock(2) on FOLDER/.foundry-lock,
// which holds the owner's pid for the message a second writer gets. The kernel drops the lock
// when its owner exits, however it exits (SIGKILL included), so a lock file left by a dead
// process is free, and taken over with a note. The file is removed when the lock is let go; a
// process that opened it before then sees, once it has the lock, that the name now points
// elsewhere (or nowhere) and opens it again, so two processes never both hold "the" lock.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace foundry {

class FolderLock {
 public:
  // Makes `folder` (and the folders above it) when missing; a folder it made is removed again on
  // Release when it is then empty. `option` names it in messages
  // ("--save-folder"). Taken: "--save-folder 'f': another process (pid 123) is writing into it;
  // wait for it to end or choose another folder".
  static StatusOr<FolderLock> Take(const std::string& folder, const std::string& option);

  FolderLock() = default;
  FolderLock(FolderLock&& other) noexcept { *this = std::move(other); }
  FolderLock& operator=(FolderLock&& other) noexcept;
  ~FolderLock() { Release(); }

  // "" or what taking it found: "took over the lock of pid 123, which is no longer running".
  const std::string& note() const { return note_; }
  void Release();

 private:
  int fd_ = -1;
  std::string path_;
  std::string note_;
  std::vector<std::string> made_;  // outermost first
};

// Whether process `pid` exists (kill(pid, 0) does not say ESRCH).
bool ProcessIsAlive(long pid);

}  // namespace foundry
