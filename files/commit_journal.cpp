// commit_journal.cpp: the journal of a commit under way, and finishing one whose process died (see
// commit_journal.hpp).
//
// The file, text with the names as counted bytes (a name may hold any byte but '/' and NUL):
//   facegen commit journal 1
//   state P                                  P: under way, D: done (at a fixed offset)
//   token TOKEN
//   entries N
//   then per entry: "<F|D> <existed 0|1> <inode> <temp bytes> <final bytes>\n" TEMP FINAL "\n"
#include "files/commit_journal.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

#include "common/errors.hpp"
#include "common/text_format.hpp"
#include "files/path_parts.hpp"
#include "files/temp_registry.hpp"

namespace facegen {

const char kCommitJournalPrefix[] = ".facegen-commit-";

namespace {

const char kHeader[] = "facegen commit journal 1\nstate ";
constexpr off_t kStateOffset = sizeof kHeader - 1;

std::string backup_name_for(const std::string& token, size_t entry) {
  return ".facegen-old-" + token + "-" + std::to_string(entry);
}

// A descriptor for the *at() calls and the directory's fsync; a directory that may be written but not
// listed (mode 0300) gives an O_PATH one, whose fsync fails with EBADF (sync_directory then skips it).
int open_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0 || errno != EACCES) return fd;
  return ::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
}

bool sync_directory(int fd) { return ::fsync(fd) == 0 || errno == EBADF; }

// The inode at `name` in the directory, 0 when nothing is there.
uint64_t inode_at(int dir, const std::string& name) {
  struct stat st;
  return ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string serialise(const std::string& token, const std::vector<CommitEntry>& entries) {
  std::string text = std::string(kHeader) + "P\ntoken " + token + "\nentries " + std::to_string(entries.size()) + "\n";
  for (const CommitEntry& e : entries) {
    text += std::string(e.folder ? "D " : "F ") + (e.existed ? "1 " : "0 ") + std::to_string(e.inode) + " " +
            std::to_string(e.temp.size()) + " " + std::to_string(e.final.size()) + "\n" + e.temp + e.final + "\n";
  }
  return text;
}

struct ParsedJournal {
  char state = 'P';
  std::string token;
  std::vector<CommitEntry> entries;
};

bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

ParsedJournal parse(const std::string& text, const std::string& path) {
  auto bad = [&](const std::string& what) {
    return UserError(path + " is not a commit journal of facegen: " + what);
  };
  const std::string header = kHeader;
  if (text.compare(0, header.size(), header) != 0) throw bad("its first line is not \"facegen commit journal 1\"");
  ParsedJournal journal;
  std::istringstream in(text.substr(header.size()));
  size_t count = 0;
  std::string token_word, entries_word;
  in >> journal.state >> token_word >> journal.token >> entries_word >> count;
  if (!in || (journal.state != 'P' && journal.state != 'D') || token_word != "token" || entries_word != "entries" ||
      !plain_name(journal.token) || in.get() != '\n') {
    throw bad("its state, token or entry count is malformed");
  }
  for (size_t i = 0; i < count; ++i) {
    char kind = 0;
    int existed = -1;
    uint64_t inode = 0;
    size_t temp_bytes = 0, final_bytes = 0;
    in >> kind >> existed >> inode >> temp_bytes >> final_bytes;
    if (!in || (kind != 'F' && kind != 'D') || (existed != 0 && existed != 1) || in.get() != '\n' ||
        temp_bytes > 4096 || final_bytes > 4096) {
      throw bad("entry " + std::to_string(i + 1) + " of " + std::to_string(count) + " is malformed");
    }
    CommitEntry e;
    e.folder = kind == 'D';
    e.existed = existed == 1;
    e.inode = inode;
    e.temp.resize(temp_bytes);
    e.final.resize(final_bytes);
    in.read(&e.temp[0], static_cast<std::streamsize>(temp_bytes));
    in.read(&e.final[0], static_cast<std::streamsize>(final_bytes));
    if (!in || in.get() != '\n' || !plain_name(e.temp) || !plain_name(e.final)) {
      throw bad("the names of entry " + std::to_string(i + 1) + " are cut short or not plain names");
    }
    journal.entries.push_back(std::move(e));
  }
  if (in.peek() != std::char_traits<char>::eof()) throw bad("it goes on after its last entry");
  return journal;
}

std::string read_whole(int fd, const std::string& path) {
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UserError("cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) return text;
    text.append(buffer, static_cast<size_t>(n));
  }
}

// Removes what is at `name` in the directory (a folder with its contents); ENOENT is success.
bool remove_entry(int dir, const std::string& directory, const std::string& name) {
  struct stat st;
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT;
  if (!S_ISDIR(st.st_mode)) return ::unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT;
  std::error_code error;
  std::filesystem::remove_all(directory + "/" + name, error);
  return !error;
}

[[noreturn]] void cannot_finish(const std::string& journal, const std::string& what, int err) {
  throw UserError("cannot finish the commit that " + journal + " records: " + what + ": " + std::strerror(err));
}

// Every new output into place, then what the commit would have removed.
void roll_forward(const ParsedJournal& j, int dir, const std::string& directory, const std::string& path) {
  for (const CommitEntry& e : j.entries) {
    if (inode_at(dir, e.final) == e.inode) continue;
    const bool exchange = e.folder && inode_at(dir, e.final) != 0;
    const int moved = exchange ? ::renameat2(dir, e.temp.c_str(), dir, e.final.c_str(), RENAME_EXCHANGE)
                               : ::renameat(dir, e.temp.c_str(), dir, e.final.c_str());
    if (moved != 0) cannot_finish(path, "renaming " + e.temp + " to " + e.final + " failed", errno);
  }
  for (size_t i = 0; i < j.entries.size(); ++i) {
    const CommitEntry& e = j.entries[i];
    if (!remove_entry(dir, directory, backup_name_for(j.token, i)))
      cannot_finish(path, "removing the backup of " + e.final, errno);
    if (e.folder && inode_at(dir, e.temp) != 0 && inode_at(dir, e.temp) != e.inode &&
        !remove_entry(dir, directory, e.temp)) {
      cannot_finish(path, "removing the old folder at " + e.temp, errno);
    }
  }
}

// Each old output back (from its backup, or the old folder exchanged back), the new ones removed.
void roll_back(const ParsedJournal& j, int dir, const std::string& directory, const std::string& path) {
  for (size_t i = 0; i < j.entries.size(); ++i) {
    const CommitEntry& e = j.entries[i];
    const std::string backup = backup_name_for(j.token, i);
    const bool new_in_place = inode_at(dir, e.final) == e.inode;
    int undone = 0;
    if (e.folder && new_in_place) {
      undone = e.existed && inode_at(dir, e.temp) != 0
                   ? ::renameat2(dir, e.temp.c_str(), dir, e.final.c_str(), RENAME_EXCHANGE)
                   : (remove_entry(dir, directory, e.final) ? 0 : -1);
    } else if (!e.folder && e.existed && inode_at(dir, backup) != 0) {
      // rename() between two links of one file does nothing: the backup of an old file that was
      // never replaced just goes.
      undone = inode_at(dir, backup) == inode_at(dir, e.final) ? ::unlinkat(dir, backup.c_str(), 0)
                                                               : ::renameat(dir, backup.c_str(), dir, e.final.c_str());
    } else if (!e.folder && !e.existed && new_in_place) {
      undone = ::unlinkat(dir, e.final.c_str(), 0);
    }
    if (undone != 0) cannot_finish(path, "putting back the old " + e.final, errno);
    if (inode_at(dir, e.temp) == e.inode && !remove_entry(dir, directory, e.temp))
      cannot_finish(path, "removing the new output at " + e.temp, errno);
  }
}

}  // namespace

CommitJournal::CommitJournal(const std::string& directory, std::vector<CommitEntry> entries) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  static const char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  directory_fd_ = open_directory(directory);
  if (directory_fd_ < 0) {
    throw UserError("cannot open the output directory " + directory + ": " + std::strerror(errno) +
                    " (no output was replaced)");
  }
  const std::string tag = temp_tag();
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    token_ = tag.empty() ? "" : tag + "-";
    for (int i = 0; i < 6; ++i) token_.push_back(kLetters[random() % (sizeof kLetters - 1)]);
    const std::string name = kCommitJournalPrefix + token_;
    fd_ = ::openat(directory_fd_, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ >= 0) path_ = directory + "/" + name;
    if (fd_ < 0 && errno != EEXIST) break;
  }
  auto fail = [&](const std::string& what) {
    const int err = errno;
    if (fd_ >= 0) {
      ::unlinkat(directory_fd_, base_name(path_).c_str(), 0);
      ::close(fd_);
    }
    ::close(directory_fd_);
    throw UserError(what + ": " + std::strerror(err) + " (no output was replaced)");
  };
  if (fd_ < 0) fail("cannot create the commit journal " + directory + "/" + kCommitJournalPrefix + "...");
  if (::flock(fd_, LOCK_EX) != 0) fail("cannot lock the commit journal " + path_);
  if (!write_all(fd_, serialise(token_, entries))) fail("writing the commit journal " + path_ + " failed");
  if (::fsync(fd_) != 0 || !sync_directory(directory_fd_)) fail("syncing the commit journal " + path_ + " failed");
}

CommitJournal::~CommitJournal() {
  if (fd_ >= 0) ::close(fd_);
  if (directory_fd_ >= 0) ::close(directory_fd_);
}

std::string CommitJournal::backup_name(size_t entry) const { return backup_name_for(token_, entry); }

void CommitJournal::done() {
  if (!temp_tag().empty() && ::pwrite(fd_, "D", 1, kStateOffset) == 1) return;
  abandon();
}

void CommitJournal::abandon() {
  if (::unlinkat(directory_fd_, base_name(path_).c_str(), 0) != 0) {
    std::fprintf(stderr, "facegen: warning: cannot remove the commit journal %s: %s\n", path_.c_str(),
                 std::strerror(errno));
  }
}

FinishReport finish_commit(const std::string& journal_path) {
  FinishReport report;
  const int fd = ::open(journal_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) throw UserError("cannot open commit journal " + journal_path + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return report;  // Busy
    throw UserError("cannot lock commit journal " + journal_path + ": " + std::strerror(errno));
  }
  const ParsedJournal journal = parse(read_whole(fd, journal_path), journal_path);
  const std::string directory = directory_of(journal_path);
  const int dir = open_directory(directory);
  if (dir < 0) throw UserError("cannot open " + directory + ": " + std::strerror(errno));
  Closer dir_closer{dir};
  report.outputs = journal.entries.size();
  if (!journal.entries.empty()) report.first_final = journal.entries.front().final;
  report.was_done = journal.state == 'D';
  bool every_new_one_there = true;
  for (const CommitEntry& e : journal.entries) {
    every_new_one_there = every_new_one_there && (inode_at(dir, e.final) == e.inode || inode_at(dir, e.temp) == e.inode);
  }
  if (report.was_done) {
    report.outcome = FinishOutcome::NewInPlace;  // nothing left to do but remove the journal
  } else if (every_new_one_there) {
    roll_forward(journal, dir, directory, journal_path);
    report.outcome = FinishOutcome::NewInPlace;
  } else {
    roll_back(journal, dir, directory, journal_path);
    report.outcome = FinishOutcome::OldInPlace;
  }
  if (!sync_directory(dir) || (::unlinkat(dir, base_name(journal_path).c_str(), 0) != 0 && errno != ENOENT)) {
    cannot_finish(journal_path, "removing the journal", errno);
  }
  return report;
}

std::string outputs_named(const FinishReport& report) {
  if (report.outputs <= 1) return report.first_final;
  return report.first_final + " and " + with_commas(static_cast<int64_t>(report.outputs) - 1) + " more";
}

std::vector<std::string> finish_dead_commits(const std::string& directory) {
  std::vector<std::string> names;
  if (DIR* listing = ::opendir(directory.c_str())) {
    while (const struct dirent* entry = ::readdir(listing)) {
      if (std::strncmp(entry->d_name, kCommitJournalPrefix, sizeof kCommitJournalPrefix - 1) == 0)
        names.push_back(entry->d_name);
    }
    ::closedir(listing);
  }
  std::vector<std::string> sentences;
  for (const std::string& name : names) {
    const std::string path = (directory == "/" ? "" : directory) + "/" + name;
    try {
      const FinishReport report = finish_commit(path);
      const std::string outputs = outputs_named(report);
      if (report.outcome == FinishOutcome::NewInPlace && !report.was_done) {
        sentences.push_back("finished the commit of an earlier run that was cut short (" + path + "): its new " +
                            outputs + " are in place");
      } else if (report.outcome == FinishOutcome::OldInPlace) {
        sentences.push_back("undid the commit of an earlier run that was cut short (" + path + ") and lost an output: " +
                            outputs + " are as before that run");
      }
    } catch (const UserError& e) {
      sentences.push_back(std::string("warning: ") + e.what());
    }
  }
  return sentences;
}

}  // namespace facegen
