// commit_journal.cpp: the journal of a commit under way, and finishing one whose process died (see
// commit_journal.hpp).
//
// The file, text with the names as counted bytes (a name may hold any byte but '/' and NUL):
//   facegen commit journal 1
//   state P                                  P: under way, D: done (at a fixed offset)
//   token TOKEN                              [TAG-]XXXXXX, the end of the file's own name
//   entries N                                1 or more
//   then per entry: "<F|D> <existed 0|1> <inode> <temp bytes> <final bytes>\n" TEMP FINAL "\n"
//
// What finishing reads, and how much: the file is examined (fstatat, no link followed, nothing
// opened that is not a regular file) before it is opened (O_NOFOLLOW | O_NONBLOCK, so a FIFO put in
// its place meanwhile cannot block), then read front to back in pieces of 64 KiB and parsed as it
// comes, so a file that is not a journal is refused at its first wrong byte. Its size must be at
// most kMaxJournalBytes (1 GiB: 2 million entries of the longest names, 10 million or more of the
// names runs give; the writer refuses a commit whose journal would be larger) and at most its header
// plus N times the longest entry (kMaxEntryBytes: a line of 33 bytes and two names of NAME_MAX).
#include "commit/commit_journal.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "common/errors.hpp"
#include "common/file_descriptor.hpp"
#include "common/text_format.hpp"
#include "commit/existing_outputs.hpp"
#include "common/path_parts.hpp"
#include "common/temp_registry.hpp"

namespace facegen {

const char kCommitJournalPrefix[] = ".facegen-commit-";

namespace {

const char kFirstLine[] = "facegen commit journal 1\n";
const char kHeader[] = "facegen commit journal 1\nstate ";
constexpr off_t kStateOffset = sizeof kHeader - 1;
const char kBackupPrefix[] = ".facegen-old-";
const char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";  // mkstemp's too

constexpr size_t kRandomBytes = 6;   // XXXXXX of a token or a temporary name
constexpr size_t kMaxTagBytes = 32;  // FACEGEN_TEMP_TAG (temp_registry.hpp)
constexpr uint64_t kMaxJournalBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxEntryBytes = sizeof "D 1 18446744073709551615 255 255\n" - 1 + 2 * NAME_MAX + 1;
// A PNG folder's temporary is shortened to leave room for "/NNN/NNNNNN.png" inside it; at most this
// (a subfolder of up to 17 digits, a file of up to 20).
constexpr size_t kMaxFolderInnerBytes = 1 + 17 + 1 + 20 + 4;

std::string backup_name_for(const std::string& token, size_t entry) {
  return kBackupPrefix + token + "-" + std::to_string(entry);
}

// A name as a message shows it: control bytes (a newline in a name found in a shared folder) as '?',
// so that one sentence stays one line.
std::string shown(const std::string& name) {
  std::string text = name;
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return text;
}

// A descriptor for the *at() calls and the directory's fsync; a directory that may be written but not
// listed (mode 0300) gives an O_PATH one, whose fsync fails with EBADF (sync_directory then skips it).
int open_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0 || errno != EACCES) return fd;
  return ::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
}

bool sync_directory(int fd) { return ::fsync(fd) == 0 || errno == EBADF; }

std::string serialise(const std::string& token, const std::vector<CommitEntry>& entries) {
  std::string text = std::string(kHeader) + "P\ntoken " + token + "\nentries " + std::to_string(entries.size()) + "\n";
  for (const CommitEntry& e : entries) {
    text += std::string(e.folder ? "D " : "F ") + (e.existed ? "1 " : "0 ") + std::to_string(e.inode) + " " +
            std::to_string(e.temp.size()) + " " + std::to_string(e.final.size()) + "\n" + e.temp + e.final + "\n";
  }
  return text;
}

// --- whether a file is a journal of this user's facegen -----------------------------------------------

// Why a journal is not one this user's facegen wrote: it is then left exactly as it is.
struct NotAJournal : UserError {
  std::string path, why;
  NotAJournal(const std::string& journal, const std::string& reason)
      : UserError(shown(journal) + " is not a commit journal of this user's facegen (" + reason +
                  "); nothing was changed"),
        path(shown(journal)),
        why(reason) {}
};

bool letters_and_digits(const std::string& text, size_t from = 0) {
  for (size_t i = from; i < text.size(); ++i)
    if (text[i] == '\0' || std::strchr(kLetters, text[i]) == nullptr) return false;
  return from < text.size();
}

// "TAG-" of a token facegen makes ([TAG-]XXXXXX), "" for one with no tag; false when it makes no
// such token.
bool token_tag(const std::string& token, std::string* tag_part) {
  if (token.size() < kRandomBytes || !letters_and_digits(token, token.size() - kRandomBytes)) return false;
  if (token.size() == kRandomBytes) {
    tag_part->clear();
    return true;
  }
  const size_t tag = token.size() - kRandomBytes - 1;
  if (tag < 1 || tag > kMaxTagBytes || token[tag] != '-' || !letters_and_digits(token.substr(0, tag))) return false;
  *tag_part = token.substr(0, tag + 1);
  return true;
}

bool plain_name(const std::string& name) {
  return !name.empty() && name.size() <= NAME_MAX && name != "." && name != ".." &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

bool begins_with(const std::string& text, const char* prefix) {
  return text.compare(0, std::strlen(prefix), prefix) == 0;
}

// What decides whether a temporary's name may be shortened (temp_registry.cpp, fit_name_max).
struct NameLimits {
  size_t name_max = NAME_MAX;
  size_t directory_bytes = 0;  // the longest way the journal's directory was named: as given, or absolute
  size_t path_max = PATH_MAX;
};

// Whether `temp` is the name facegen gives the temporary of `final` (temp_registry.cpp):
// FINAL.tmp-[TAG-]XXXXXX, or, only where that name would not fit NAME_MAX or its path PATH_MAX,
// the same with characters of FINAL dropped before ".tmp-" (never all of them).
bool is_temp_name_of(const std::string& temp, const std::string& final, const std::string& tag_part, bool folder,
                     const NameLimits& limits) {
  const std::string marker = ".tmp-" + tag_part;
  if (temp.size() < 1 + marker.size() + kRandomBytes) return false;
  const size_t stem = temp.size() - marker.size() - kRandomBytes;
  if (temp.compare(stem, marker.size(), marker) != 0 || !letters_and_digits(temp, stem + marker.size())) return false;
  if (stem > final.size() || temp.compare(0, stem, final, 0, stem) != 0) return false;
  if (stem == final.size()) return true;
  const size_t full = final.size() + marker.size() + kRandomBytes;
  return full > limits.name_max ||
         limits.directory_bytes + 1 + full + (folder ? kMaxFolderInnerBytes : 0) + 1 > limits.path_max;
}

// Reads a journal front to back in pieces, never past the size fstat gave: it holds one piece at a
// time, whatever the file.
class JournalReader {
 public:
  JournalReader(int fd, uint64_t size) : fd_(fd), size_(size) {}

  uint64_t offset() const { return consumed_; }
  bool at_end() { return consumed_ == size_; }
  int error() const { return error_; }

  int next() {  // the next byte, or -1 at the end (or on a read error: error())
    if (position_ == filled_ && !refill()) return -1;
    ++consumed_;
    return static_cast<unsigned char>(buffer_[position_++]);
  }
  bool expect(const char* text) {
    for (const char* c = text; *c != '\0'; ++c)
      if (next() != static_cast<unsigned char>(*c)) return false;
    return true;
  }
  // Decimal digits as std::to_string writes them (no sign, no leading zero), at most `max`, then `end`.
  bool number(uint64_t max, char end, uint64_t* value) {
    *value = 0;
    int digits = 0;
    for (int c = next();; c = next()) {
      if (c == static_cast<unsigned char>(end) && digits > 0) return *value <= max;
      if (c < '0' || c > '9' || (digits == 1 && *value == 0) || digits == 20) return false;
      const uint64_t digit = static_cast<uint64_t>(c - '0');
      if (*value > (UINT64_MAX - digit) / 10) return false;
      *value = *value * 10 + digit;
      ++digits;
    }
  }
  bool take(size_t bytes, std::string* out) {
    out->clear();
    for (size_t i = 0; i < bytes; ++i) {
      const int c = next();
      if (c < 0) return false;
      out->push_back(static_cast<char>(c));
    }
    return true;
  }
  // Bytes up to `end` (not kept), at most `max` of them.
  bool until(char end, size_t max, std::string* out) {
    out->clear();
    for (int c = next(); c != static_cast<unsigned char>(end); c = next()) {
      if (c < 0 || out->size() == max) return false;
      out->push_back(static_cast<char>(c));
    }
    return true;
  }

 private:
  bool refill() {
    const uint64_t left = size_ - consumed_;
    if (left == 0) return false;
    for (;;) {
      const ssize_t n = ::pread(fd_, buffer_, static_cast<size_t>(std::min<uint64_t>(left, sizeof buffer_)),
                                static_cast<off_t>(consumed_));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = n < 0 ? errno : 0;
        return false;
      }
      filled_ = static_cast<size_t>(n);
      position_ = 0;
      return true;
    }
  }

  int fd_;
  uint64_t size_;
  uint64_t consumed_ = 0;
  size_t position_ = 0, filled_ = 0;
  int error_ = 0;
  char buffer_[65536];
};

struct ParsedJournal {
  char state = 'P';
  std::string token;
  std::vector<CommitEntry> entries;
};

// Parses a journal of `size` bytes named `name` (.facegen-commit-TOKEN); throws NotAJournal at the
// first thing facegen does not write.
ParsedJournal parse(JournalReader& in, uint64_t size, const std::string& path, const std::string& name,
                    const NameLimits& limits) {
  auto bad = [&](const std::string& why) { return NotAJournal(path, why); };
  auto read_failed = [&] { return UserError("cannot read " + shown(path) + ": " + std::strerror(in.error())); };
  if (size == 0) throw bad("it is empty");
  ParsedJournal journal;
  if (!in.expect(kFirstLine)) {
    if (in.error() != 0) throw read_failed();
    throw bad("its first line is not \"facegen commit journal 1\"");
  }
  const int state = in.expect("state ") ? in.next() : -1;
  if ((state != 'P' && state != 'D') || in.next() != '\n') throw bad("its state line is not \"state P\" or \"state D\"");
  journal.state = static_cast<char>(state);
  std::string tag_part;
  if (!in.expect("token ") || !in.until('\n', kMaxTagBytes + 1 + kRandomBytes, &journal.token) ||
      !token_tag(journal.token, &tag_part)) {
    throw bad("its token line is not \"token [TAG-]XXXXXX\" of letters and digits");
  }
  const std::string suffix = name.substr(sizeof kCommitJournalPrefix - 1);
  if (journal.token != suffix) throw bad("its token " + journal.token + " is not the end of its name, " + shown(suffix));
  uint64_t count = 0;
  if (!in.expect("entries ") || !in.number(kMaxJournalBytes, '\n', &count)) {
    throw bad("its entries line is not \"entries N\"");
  }
  if (count == 0) throw bad("it records no output");
  if (size - in.offset() > count * kMaxEntryBytes) {
    throw bad("it is " + with_commas(static_cast<int64_t>(size)) + " bytes, more than " + with_commas(static_cast<int64_t>(count)) +
              " entries take");
  }
  for (uint64_t i = 0; i < count; ++i) {
    const std::string which = "entry " + with_commas(static_cast<int64_t>(i + 1)) + " of " + with_commas(static_cast<int64_t>(count));
    const int kind = in.next();
    const int existed = in.next() == ' ' ? in.next() : -1;
    uint64_t inode = 0, temp_bytes = 0, final_bytes = 0;
    CommitEntry e;
    if ((kind != 'F' && kind != 'D') || (existed != '0' && existed != '1') || in.next() != ' ' ||
        !in.number(UINT64_MAX, ' ', &inode) || inode == 0 || !in.number(NAME_MAX, ' ', &temp_bytes) ||
        !in.number(NAME_MAX, '\n', &final_bytes) || !in.take(temp_bytes, &e.temp) || !in.take(final_bytes, &e.final) ||
        in.next() != '\n') {
      if (in.error() != 0) throw read_failed();
      throw bad(which + " is malformed or cut short");
    }
    e.folder = kind == 'D';
    e.existed = existed == '1';
    e.inode = inode;
    // A final name is an output's name in the journal's own directory, never one of the commit's own
    // hidden files; a temporary is the name facegen gave that output's temporary.
    if (!plain_name(e.final) || begins_with(e.final, kCommitJournalPrefix) || begins_with(e.final, kBackupPrefix)) {
      throw bad(which + " names the output " + shown(e.final) + ", not a name facegen gives an output in its folder");
    }
    if (!is_temp_name_of(e.temp, e.final, tag_part, e.folder, limits)) {
      throw bad(which + " names a temporary that is not " + shown(e.final) + ".tmp-" + tag_part + "XXXXXX");
    }
    journal.entries.push_back(std::move(e));
  }
  if (!in.at_end()) throw bad("it goes on after its last entry");
  // No name twice (an output renamed over another's): all 2N names sorted, by pointer, so that a
  // journal of millions of entries costs 16 bytes a name more.
  std::vector<std::pair<const std::string*, size_t>> names;
  names.reserve(2 * journal.entries.size());
  for (size_t i = 0; i < journal.entries.size(); ++i) {
    names.emplace_back(&journal.entries[i].final, i);
    names.emplace_back(&journal.entries[i].temp, i);
  }
  std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) {
    return *a.first < *b.first || (*a.first == *b.first && a.second < b.second);
  });
  for (size_t k = 1; k < names.size(); ++k) {
    if (*names[k].first != *names[k - 1].first) continue;
    throw bad("entry " + with_commas(static_cast<int64_t>(names[k].second + 1)) + " of " +
              with_commas(static_cast<int64_t>(count)) + " names what entry " +
              with_commas(static_cast<int64_t>(names[k - 1].second + 1)) + " names");
  }
  return journal;
}

// --- acting on what a journal recorded ----------------------------------------------------------------

// The journal's directory: its descriptor and what may be removed in it.
struct Place {
  int fd = -1;
  dev_t device = 0;
  bool sticky = false;  // a shared folder (/tmp): only this user's entries are touched
};

// What is at `name` (not following a link); false when nothing is.
bool stat_at(const Place& place, const std::string& name, struct stat* st) {
  return ::fstatat(place.fd, name.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0;
}

// Whether the new output the entry recorded is at `name`: its inode, on the directory's device, and
// its kind (a regular file, or a folder).
bool recorded_new_at(const Place& place, const CommitEntry& e, const std::string& name) {
  struct stat st;
  return stat_at(place, name, &st) && st.st_dev == place.device && static_cast<uint64_t>(st.st_ino) == e.inode &&
         (e.folder ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

bool this_users_here(const Place& place, const struct stat& st) { return !place.sticky || st.st_uid == ::geteuid(); }

[[noreturn]] void cannot_finish(const std::string& journal, const std::string& what, int err = 0) {
  throw UserError("cannot finish the commit that " + shown(journal) + " records: " + what +
                  (err != 0 ? std::string(": ") + std::strerror(err) : std::string()));
}

// Removes the backup of an old file: only a regular file (a hard link of the old output); anything
// else that has its name is left, and said in `left`.
void remove_backup(const Place& place, const std::string& backup, const std::string& journal,
                   std::vector<std::string>* left) {
  struct stat st;
  if (!stat_at(place, backup, &st)) return;
  if (!S_ISREG(st.st_mode) || !this_users_here(place, st)) {
    left->push_back(backup + ", which is not the backup of an old file");
    return;
  }
  if (::unlinkat(place.fd, backup.c_str(), 0) != 0 && errno != ENOENT) cannot_finish(journal, "removing " + backup, errno);
}

// Removes the old PNG folder a folder exchange left at `name`: only its PNGs and then the folder
// (remove_old_png_folder), never anything recursively.
void remove_old_folder(const Place& place, const CommitEntry& e, const std::string& name,
                       std::vector<std::string>* left) {
  struct stat st;
  if (!stat_at(place, name, &st) || recorded_new_at(place, e, name)) return;
  if (!S_ISDIR(st.st_mode) || !this_users_here(place, st)) {
    left->push_back(shown(name) + ", which is not the old folder " + shown(e.final));
    return;
  }
  const std::string why = remove_old_png_folder(place.fd, name);
  if (!why.empty()) left->push_back("the old folder now at " + shown(name) + " (" + why + ")");
}

// Every new output into place, then what the commit would have removed.
void roll_forward(const ParsedJournal& j, const Place& place, const std::string& path, std::vector<std::string>* left) {
  for (const CommitEntry& e : j.entries) {
    if (recorded_new_at(place, e, e.final)) continue;
    if (!recorded_new_at(place, e, e.temp)) cannot_finish(path, "the new " + shown(e.final) + " is gone");
    struct stat st;
    const bool exchange = e.folder && e.existed && stat_at(place, e.final, &st) && S_ISDIR(st.st_mode) &&
                          this_users_here(place, st);
    const int moved = exchange ? ::renameat2(place.fd, e.temp.c_str(), place.fd, e.final.c_str(), RENAME_EXCHANGE)
                               : ::renameat(place.fd, e.temp.c_str(), place.fd, e.final.c_str());
    if (moved != 0) cannot_finish(path, "renaming " + shown(e.temp) + " to " + shown(e.final) + " failed", errno);
  }
  for (size_t i = 0; i < j.entries.size(); ++i) {
    const CommitEntry& e = j.entries[i];
    if (!e.existed) continue;
    if (e.folder) {
      remove_old_folder(place, e, e.temp, left);
    } else {
      remove_backup(place, backup_name_for(j.token, i), path, left);
    }
  }
}

// Each old output back (from its backup, or the old folder exchanged back), the new ones removed.
void roll_back(const ParsedJournal& j, const Place& place, const std::string& path) {
  for (size_t i = 0; i < j.entries.size(); ++i) {
    const CommitEntry& e = j.entries[i];
    const std::string backup = backup_name_for(j.token, i);
    const bool new_in_place = recorded_new_at(place, e, e.final);
    struct stat at_temp, at_backup, at_final;
    const bool final_there = stat_at(place, e.final, &at_final);
    int undone = 0;
    std::string why;
    if (e.folder && new_in_place) {
      const bool old_folder = e.existed && stat_at(place, e.temp, &at_temp) && S_ISDIR(at_temp.st_mode) &&
                              !recorded_new_at(place, e, e.temp) && this_users_here(place, at_temp);
      if (old_folder) {
        undone = ::renameat2(place.fd, e.temp.c_str(), place.fd, e.final.c_str(), RENAME_EXCHANGE);
      } else {
        why = remove_old_png_folder(place.fd, e.final);
      }
    } else if (!e.folder && e.existed && stat_at(place, backup, &at_backup) && S_ISREG(at_backup.st_mode) &&
               this_users_here(place, at_backup)) {
      // rename() between two links of one file does nothing: the backup of an old file that was
      // never replaced just goes. The old file goes back only over the new one, or where nothing is.
      if (final_there && at_final.st_dev == at_backup.st_dev && at_final.st_ino == at_backup.st_ino) {
        undone = ::unlinkat(place.fd, backup.c_str(), 0);
      } else if (new_in_place || !final_there) {
        undone = ::renameat(place.fd, backup.c_str(), place.fd, e.final.c_str());
      } else {
        cannot_finish(path, shown(e.final) + " is neither the old output nor the new one");
      }
    } else if (!e.folder && !e.existed && new_in_place) {
      undone = ::unlinkat(place.fd, e.final.c_str(), 0);
    }
    if (undone != 0) cannot_finish(path, "putting back the old " + shown(e.final), errno);
    if (!why.empty()) cannot_finish(path, "removing the new folder " + shown(e.final) + ": " + why);
    if (!recorded_new_at(place, e, e.temp)) continue;
    if (e.folder) {
      why = remove_old_png_folder(place.fd, e.temp);
      if (!why.empty()) cannot_finish(path, "removing the new folder at " + shown(e.temp) + ": " + why);
    } else if (::unlinkat(place.fd, e.temp.c_str(), 0) != 0 && errno != ENOENT) {
      cannot_finish(path, "removing the new output at " + shown(e.temp), errno);
    }
  }
}

const char* not_regular_phrase(mode_t mode) {
  if (S_ISLNK(mode)) return "it is a symbolic link";
  if (S_ISDIR(mode)) return "it is a folder";
  if (S_ISFIFO(mode)) return "it is a FIFO";
  if (S_ISCHR(mode)) return "it is a character device";
  if (S_ISBLK(mode)) return "it is a block device";
  if (S_ISSOCK(mode)) return "it is a socket";
  return "it is not a regular file";
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Why a file's own attributes show that this user's facegen did not write it, or "".
std::string why_not_written_here(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return not_regular_phrase(st.st_mode);
  if (st.st_uid != ::geteuid()) {
    return "it belongs to uid " + std::to_string(st.st_uid) + ", and facegen runs as uid " + std::to_string(::geteuid());
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "its mode " + octal_mode(st.st_mode) + " lets its group or others write it";
  if (st.st_nlink != 1) return "it has " + std::to_string(st.st_nlink) + " hard links, where facegen's has one";
  if (static_cast<uint64_t>(st.st_size) > kMaxJournalBytes) {
    return "it is " + with_commas(static_cast<int64_t>(st.st_size)) + " bytes, more than the " +
           with_commas(static_cast<int64_t>(kMaxJournalBytes)) + " of the largest journal";
  }
  return "";
}

// The longest way of naming the directory: as given, or its absolute path (for is_temp_name_of).
size_t directory_bytes(const std::string& directory) {
  size_t bytes = directory.size();
  if (char* absolute = ::realpath(directory.c_str(), nullptr)) {
    bytes = std::max(bytes, std::strlen(absolute));
    std::free(absolute);
  }
  return bytes;
}

// Finishes the journal `name` in the directory `place` (named `directory`; `path` for messages).
FinishReport finish_in(const Place& place, const std::string& directory, const std::string& name,
                       const std::string& path) {
  FinishReport report;
  // Examined before it is opened: a FIFO, a device or a link is never opened at all.
  struct stat before;
  if (!stat_at(place, name, &before)) {
    throw UserError("cannot open commit journal " + shown(path) + ": " + std::strerror(errno));
  }
  std::string why = why_not_written_here(before);
  if (!why.empty()) throw NotAJournal(path, why);
  if (!begins_with(name, kCommitJournalPrefix) || name.size() == sizeof kCommitJournalPrefix - 1) {
    throw NotAJournal(path, std::string("its name does not begin with ") + kCommitJournalPrefix);
  }
  Descriptor journal{::openat(place.fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
  if (journal.fd < 0) throw UserError("cannot open commit journal " + shown(path) + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(journal.fd, &st) != 0) throw UserError("cannot examine " + shown(path) + ": " + std::strerror(errno));
  why = why_not_written_here(st);
  if (!why.empty()) throw NotAJournal(path, why);
  if (st.st_dev != before.st_dev || st.st_ino != before.st_ino) throw NotAJournal(path, "it was replaced as it was read");
  if (::flock(journal.fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return report;  // Busy
    throw UserError("cannot lock commit journal " + shown(path) + ": " + std::strerror(errno));
  }
  // Its size once the lock is held: the writer wrote it whole under the lock.
  if (::fstat(journal.fd, &st) != 0) throw UserError("cannot examine " + shown(path) + ": " + std::strerror(errno));
  why = why_not_written_here(st);
  if (!why.empty()) throw NotAJournal(path, why);
  NameLimits limits;
  const long name_max = ::fpathconf(place.fd, _PC_NAME_MAX);
  if (name_max > 0) limits.name_max = static_cast<size_t>(name_max);
  limits.directory_bytes = directory_bytes(directory);
  JournalReader reader(journal.fd, static_cast<uint64_t>(st.st_size));
  const ParsedJournal parsed = parse(reader, static_cast<uint64_t>(st.st_size), path, name, limits);

  report.outputs = parsed.entries.size();
  report.first_final = shown(parsed.entries.front().final);
  report.was_done = parsed.state == 'D';
  bool every_new_one_there = true;
  for (const CommitEntry& e : parsed.entries) {
    every_new_one_there = every_new_one_there && (recorded_new_at(place, e, e.final) || recorded_new_at(place, e, e.temp));
  }
  if (report.was_done) {
    report.outcome = FinishOutcome::NewInPlace;  // nothing left to do but remove the journal
  } else if (every_new_one_there) {
    roll_forward(parsed, place, path, &report.left);
    report.outcome = FinishOutcome::NewInPlace;
  } else {
    roll_back(parsed, place, path);
    report.outcome = FinishOutcome::OldInPlace;
  }
  if (!sync_directory(place.fd)) cannot_finish(path, "syncing its directory", errno);
  // The journal goes only while its name still holds the file that was read.
  struct stat now;
  if (stat_at(place, name, &now) && (now.st_dev != st.st_dev || now.st_ino != st.st_ino)) {
    cannot_finish(path, "another file took the journal's name meanwhile");
  }
  if (::unlinkat(place.fd, name.c_str(), 0) != 0 && errno != ENOENT) cannot_finish(path, "removing the journal", errno);
  return report;
}

Place open_place(const std::string& directory, int* fd) {
  Place place;
  place.fd = *fd = open_directory(directory);
  struct stat st;
  if (place.fd >= 0 && ::fstat(place.fd, &st) == 0) {
    place.device = st.st_dev;
    place.sticky = (st.st_mode & S_ISVTX) != 0;
  }
  return place;
}

}  // namespace

CommitJournal::CommitJournal(const std::string& directory, std::vector<CommitEntry> entries) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  directory_fd_ = open_directory(directory);
  if (directory_fd_ < 0) {
    throw UserError("cannot open the output directory " + directory + ": " + std::strerror(errno) +
                    " (no output was replaced)");
  }
  const std::string tag = temp_tag();
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    token_ = tag.empty() ? "" : tag + "-";
    for (size_t i = 0; i < kRandomBytes; ++i) token_.push_back(kLetters[random() % (sizeof kLetters - 1)]);
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
  const std::string text = serialise(token_, entries);
  if (text.size() > kMaxJournalBytes) {
    errno = EFBIG;  // finish_commit would refuse it: a commit of millions of outputs
    fail("the commit journal " + path_ + " of " + with_commas(static_cast<int64_t>(entries.size())) +
         " outputs would be larger than the " + with_commas(static_cast<int64_t>(kMaxJournalBytes)) +
         " bytes facegen reads back");
  }
  if (!write_all(fd_, text)) fail("writing the commit journal " + path_ + " failed");
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
  const std::string directory = directory_of(journal_path);
  Descriptor dir;
  const Place place = open_place(directory, &dir.fd);
  if (dir.fd < 0) {
    throw UserError("cannot open commit journal " + shown(journal_path) + ": cannot open its folder: " +
                    std::strerror(errno));
  }
  return finish_in(place, directory, base_name(journal_path), journal_path);
}

std::string outputs_named(const FinishReport& report) {
  if (report.first_final.empty()) return "outputs";
  if (report.outputs <= 1) return report.first_final;
  return report.first_final + " and " + with_commas(static_cast<int64_t>(report.outputs) - 1) + " more";
}

std::string left_named(const FinishReport& report) {
  if (report.left.empty()) return "";
  return "; left alone: " + report.left.front() +
         (report.left.size() > 1 ? " and " + with_commas(static_cast<int64_t>(report.left.size()) - 1) + " more" : "");
}

std::vector<std::string> finish_dead_commits(const std::string& directory) {
  Descriptor dir;
  const Place place = open_place(directory, &dir.fd);
  if (dir.fd < 0) return {};
  std::vector<std::string> names;
  // Listed through its own descriptor, so that the names found are those of the directory acted on.
  const int listing_fd = ::openat(dir.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* listing = listing_fd >= 0 ? ::fdopendir(listing_fd) : nullptr;
  if (listing == nullptr && listing_fd >= 0) ::close(listing_fd);
  if (listing != nullptr) {
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
      const FinishReport report = finish_in(place, directory, name, path);
      const std::string outputs = outputs_named(report);
      if (report.outcome == FinishOutcome::NewInPlace && !report.was_done) {
        sentences.push_back("finished the commit of an earlier run that was cut short (" + shown(path) + "): its new " +
                            outputs + " are in place" + left_named(report));
      } else if (report.outcome == FinishOutcome::OldInPlace) {
        sentences.push_back("undid the commit of an earlier run that was cut short (" + shown(path) + ") and lost an output: " +
                            outputs + " are as before that run");
      }
    } catch (const NotAJournal& e) {
      sentences.push_back("left alone: " + e.path + " is not a commit journal of this user's facegen (" + e.why + ")");
    } catch (const UserError& e) {
      sentences.push_back(std::string("warning: ") + e.what());
    }
  }
  return sentences;
}

}  // namespace facegen
