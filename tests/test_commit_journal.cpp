// test_commit_journal.cpp: a commit killed (SIGKILL) before each of its changes to the directory is
// finished by another process into one whole set: the new one, or the old one when a new output was
// removed meanwhile; a live commit's journal is left alone; what is not a journal of this user's
// facegen (another owner, writable by others, a link, a FIFO, a folder, a device, a huge file, a
// file not of facegen's form or naming what facegen does not write) is refused in one sentence, in
// bounded time and reads, with every file byte-identical; recovery touches only what was recorded.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "commit/commit_journal.hpp"
#include "commit/output_commit.hpp"
#include "common/path_parts.hpp"
#include "common/temp_registry.hpp"
#include "test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// Old outputs r.txt, r-1.bmp and folder r/; new ones for each of them and r-2.bmp (which had none).
std::vector<PendingRename> write_old_and_new(const TempDir& dir) {
  write_file(dir.file("r.txt"), earlier_text("old text"));
  write_file(dir.file("r-1.bmp"), earlier_output(WrittenKind::Bmp, "old bmp 1"));
  std::filesystem::create_directory(dir.file("r"));
  write_file(dir.file("r/000000.png"), std::string("old png"));
  write_file(dir.file("r.txt.tmp-aaaaaa"), std::string("new text"));
  write_file(dir.file("r-1.bmp.tmp-bbbbbb"), std::string("new bmp 1"));
  write_file(dir.file("r-2.bmp.tmp-cccccc"), std::string("new bmp 2"));
  std::filesystem::create_directory(dir.file("r.tmp-dddddd"));
  write_file(dir.file("r.tmp-dddddd/000000.png"), std::string("new png"));
  return {{dir.file("r.txt.tmp-aaaaaa"), dir.file("r.txt"), false, WrittenKind::Text},
          {dir.file("r-1.bmp.tmp-bbbbbb"), dir.file("r-1.bmp"), false, WrittenKind::Bmp},
          {dir.file("r-2.bmp.tmp-cccccc"), dir.file("r-2.bmp"), false, WrittenKind::Bmp},
          {dir.file("r.tmp-dddddd"), dir.file("r"), true, WrittenKind::PngFolder}};
}
// Links of 2 backups, 4 renames, removals of 2 backups and the old folder.
constexpr int kChanges = 9;

void check_new_set(const TempDir& dir) {
  CHECK(dir.names() == std::vector<std::string>{"r", "r-1.bmp", "r-2.bmp", "r.txt"});
  CHECK(read_file(dir.file("r.txt")) == "new text");
  CHECK(read_file(dir.file("r-1.bmp")) == "new bmp 1");
  CHECK(read_file(dir.file("r-2.bmp")) == "new bmp 2");
  CHECK(read_file(dir.file("r/000000.png")) == "new png");
  CHECK(std::filesystem::directory_iterator(dir.file("r")) != std::filesystem::directory_iterator());
}

void check_old_set(const TempDir& dir) {
  CHECK(dir.names() == std::vector<std::string>{"r", "r-1.bmp", "r.txt"});
  CHECK(read_file(dir.file("r.txt")) == earlier_text("old text"));
  CHECK(read_file(dir.file("r-1.bmp")) == earlier_output(WrittenKind::Bmp, "old bmp 1"));
  CHECK(read_file(dir.file("r/000000.png")) == "old png");
}

// Commits in a child process that FACEGEN_TEST_KILL_COMMIT=kill_at kills; true when it was killed.
bool commit_killed_at(const std::vector<PendingRename>& renames, int kill_at) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setenv("FACEGEN_TEST_KILL_COMMIT", std::to_string(kill_at).c_str(), 1);
    try {
      commit_all_or_nothing(renames);
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  if (WIFEXITED(status)) REQUIRE(WEXITSTATUS(status) == 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

std::vector<std::string> journals_in(const TempDir& dir) {
  std::vector<std::string> found;
  for (const std::string& name : dir.names())
    if (name.rfind(kCommitJournalPrefix, 0) == 0) found.push_back(dir.file(name));
  return found;
}

}  // namespace

TEST_CASE("commit journal: a commit killed before each change is finished into the whole new set") {
  for (int kill_at = 1; kill_at <= kChanges + 1; ++kill_at) {
    CAPTURE(kill_at);
    TempDir dir;
    const std::vector<PendingRename> renames = write_old_and_new(dir);
    const bool killed = commit_killed_at(renames, kill_at);
    CHECK(killed == (kill_at <= kChanges));
    if (!killed) {
      CHECK(journals_in(dir).empty());  // a commit that ran to its end removed its journal
      check_new_set(dir);
      continue;
    }
    const std::vector<std::string> journals = journals_in(dir);
    REQUIRE(journals.size() == 1);
    const FinishReport report = finish_commit(journals[0]);
    CHECK(report.outcome == FinishOutcome::NewInPlace);
    CHECK(!report.was_done);
    CHECK(report.outputs == 4);
    CHECK(report.first_final == "r.txt");
    check_new_set(dir);  // the journal, backups, temporaries and the old folder gone
  }
}

TEST_CASE("commit journal: a new output removed after the kill: the commit is undone, the old set back") {
  int undone = 0;
  for (int kill_at = 1; kill_at <= kChanges; ++kill_at) {
    CAPTURE(kill_at);
    TempDir dir;
    const std::vector<PendingRename> renames = write_old_and_new(dir);
    REQUIRE(commit_killed_at(renames, kill_at));
    // A new output not yet in place, removed from outside (the folder's temporary name may hold the
    // old folder by now: only files are taken).
    std::string gone;
    for (const PendingRename& r : renames)
      if (!r.folder && gone.empty() && std::filesystem::exists(r.temp)) gone = r.temp;
    if (gone.empty()) continue;  // every new file already in place: rolling forward is the only way
    std::filesystem::remove(gone);
    const std::vector<std::string> journals = journals_in(dir);
    REQUIRE(journals.size() == 1);
    CHECK(finish_commit(journals[0]).outcome == FinishOutcome::OldInPlace);
    check_old_set(dir);
    ++undone;
  }
  CHECK(undone >= 4);  // kills before each link and rename up to the last file's
}

TEST_CASE("commit journal: a live commit's journal is left alone; a done one is removed") {
  TempDir dir;
  const std::vector<PendingRename> renames = write_old_and_new(dir);
  std::vector<CommitEntry> entries(1);
  entries[0].temp = "r.txt.tmp-aaaaaa";
  entries[0].final = "r.txt";
  entries[0].existed = true;
  struct stat st;
  REQUIRE(::stat(dir.file("r.txt.tmp-aaaaaa").c_str(), &st) == 0);
  entries[0].inode = st.st_ino;
  {
    CommitJournal live(dir.path, entries);  // holds the lock, as a process still committing does
    CHECK(finish_commit(live.path()).outcome == FinishOutcome::Busy);
    CHECK(finish_dead_commits(dir.path).empty());
    CHECK(journals_in(dir).size() == 1);
    // Marked done by hand (as a rank of run_parallel.sh's job leaves it): once the lock is free,
    // finishing only removes the journal, and every output stays as it is.
    const std::string text = read_file(live.path());
    const size_t state = text.find("\nstate P\n");
    REQUIRE(state != std::string::npos);
    const int fd = ::open(live.path().c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, "D", 1, static_cast<off_t>(state + 7)) == 1);
    ::close(fd);
  }
  ::rename(dir.file("r.txt.tmp-aaaaaa").c_str(), dir.file("moved-away").c_str());  // not touched by a done one
  const std::vector<std::string> sentences = finish_dead_commits(dir.path);
  CHECK(sentences.empty());  // nothing to tell: that commit had finished
  CHECK(journals_in(dir).empty());
  CHECK(read_file(dir.file("r.txt")) == earlier_text("old text"));
  CHECK(read_file(dir.file("moved-away")) == "new text");
}

TEST_CASE("commit journal: a dead commit is finished by the next run's scan, with one sentence") {
  TempDir dir;
  const std::vector<PendingRename> renames = write_old_and_new(dir);
  REQUIRE(commit_killed_at(renames, 4));
  const std::vector<std::string> sentences = finish_dead_commits(dir.path);
  REQUIRE(sentences.size() == 1);
  CHECK(contains(sentences[0], "finished the commit of an earlier run that was cut short"));
  CHECK(contains(sentences[0], "its new r.txt and 3 more are in place"));
  check_new_set(dir);
}

// --- journals that are not this user's facegen's --------------------------------------------------

namespace {

std::string read_file_head(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string head(bytes, '\0');
  in.read(&head[0], static_cast<std::streamsize>(bytes));
  head.resize(static_cast<size_t>(in.gcount()));
  return head;
}

// Every entry under `root` (links not followed): its kind, mode, owner and, for a file, its bytes (a
// file over 1 MiB: its size and first 4 KiB, so a sparse 4 GiB file is not read), for a link its target.
std::map<std::string, std::string> snapshot(const std::string& root) {
  std::map<std::string, std::string> tree;
  for (auto it = std::filesystem::recursive_directory_iterator(root); it != std::filesystem::recursive_directory_iterator();
       ++it) {
    const std::string path = it->path();
    struct stat st;
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    std::string what = std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) + " " + std::to_string(st.st_ino);
    if (S_ISLNK(st.st_mode)) {
      what += " -> " + std::filesystem::read_symlink(path).string();
    } else if (S_ISREG(st.st_mode)) {
      what += " " + std::to_string(st.st_size) + " ";
      what += st.st_size <= (1 << 20) ? read_file(path) : read_file_head(path, 4096);
    }
    tree[path] = what;
  }
  return tree;
}

// What one call gives, run in a child process under a deadline (a FIFO must not block it): the
// UserError's text ("" when it threw none, "killed" past the deadline) and the bytes it read
// (/proc/self/io rchar, with the few hundred of reading that file itself).
struct Outcome {
  std::string message;
  uint64_t bytes_read = 0;
};

uint64_t bytes_read_so_far() {
  const std::string io = read_file("/proc/self/io");
  const size_t at = io.find("rchar: ");
  return at == std::string::npos ? 0 : std::stoull(io.substr(at + 7));
}

Outcome within_deadline(const std::function<std::string()>& call) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    ::alarm(20);  // SIGALRM's default action ends the child: the parent sees no message
    const uint64_t before = bytes_read_so_far();
    const std::string message = call();
    const std::string text = std::to_string(bytes_read_so_far() - before) + "\n" + message;
    ssize_t ignored = ::write(pipe_fds[1], text.data(), text.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string text;
  char buffer[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    struct pollfd p = {pipe_fds[0], POLLIN, 0};
    if (::poll(&p, 1, 1000) > 0) {
      const ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
      if (n <= 0) break;
      text.append(buffer, static_cast<size_t>(n));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      break;
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  Outcome outcome;
  if (!WIFEXITED(status) || text.find('\n') == std::string::npos) {
    outcome.message = "killed";
    return outcome;
  }
  outcome.bytes_read = std::stoull(text.substr(0, text.find('\n')));
  outcome.message = text.substr(text.find('\n') + 1);
  return outcome;
}

Outcome finish_refused(const std::string& path) {
  return within_deadline([&] {
    try {
      finish_commit(path);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  });
}

Outcome scan_of(const std::string& directory) {
  return within_deadline([&] {
    std::string joined;
    for (const std::string& sentence : finish_dead_commits(directory)) joined += sentence + "\n";
    return joined;
  });
}

// A journal's text as facegen writes it, with the entries given as their lines.
std::string journal_text(const std::string& token, const std::vector<std::string>& entries, const char* state = "P") {
  std::string text = std::string("facegen commit journal 1\nstate ") + state + "\ntoken " + token + "\nentries " +
                     std::to_string(entries.size()) + "\n";
  for (const std::string& e : entries) text += e;
  return text;
}

std::string entry_line(const char* kind, int existed, uint64_t inode, const std::string& temp, const std::string& final) {
  return std::string(kind) + " " + std::to_string(existed) + " " + std::to_string(inode) + " " +
         std::to_string(temp.size()) + " " + std::to_string(final.size()) + "\n" + temp + final + "\n";
}

uint64_t inode_of(const std::string& path) {
  struct stat st;
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_ino;
}

// The one refusal, from --finish-commit and from a run's scan, each in bounded reads; every file as it was.
void check_refused(const TempDir& dir, const std::string& path, const std::string& why) {
  const std::map<std::string, std::string> before = snapshot(dir.path);
  const Outcome refused = finish_refused(path);
  CHECK(refused.message == path + " is not a commit journal of this user's facegen (" + why + "); nothing was changed");
  CHECK(refused.bytes_read < (1 << 20));
  CHECK(snapshot(dir.path) == before);
  const Outcome scanned = scan_of(dir.path);
  if (directory_of(path) == dir.path) {
    CHECK(contains(scanned.message, "left alone: " + path + " is not a commit journal of this user's facegen (" + why + ")\n"));
  }
  CHECK(scanned.bytes_read < (1 << 20));
  CHECK(snapshot(dir.path) == before);
}

}  // namespace

TEST_CASE("commit journal: what is not a journal of this user's facegen is refused in one sentence, nothing touched") {
  TempDir dir;
  const std::vector<PendingRename> renames = write_old_and_new(dir);
  REQUIRE(commit_killed_at(renames, 4));  // a real journal, two backups, one output in place
  const std::vector<std::string> journals = journals_in(dir);
  REQUIRE(journals.size() == 1);
  const std::string real = journals[0];
  const std::string real_text = read_file(real);
  const std::string token = base_name(real).substr(std::strlen(kCommitJournalPrefix));
  const std::string other = dir.file(std::string(kCommitJournalPrefix) + "Zz9Zz9");
  // Held, as a live commit holds it, so that a run's scan below leaves it alone (Busy) while the
  // journals around it are refused.
  const int held = ::open(real.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX) == 0);

  SUBCASE("a link to a real journal") {
    REQUIRE(::symlink(real.c_str(), other.c_str()) == 0);
    check_refused(dir, other, "it is a symbolic link");
    ::unlink(other.c_str());
  }
  SUBCASE("a FIFO: nothing blocks") {
    REQUIRE(::mkfifo(other.c_str(), 0600) == 0);
    check_refused(dir, other, "it is a FIFO");
    ::unlink(other.c_str());
  }
  SUBCASE("a folder") {
    std::filesystem::create_directory(other);
    write_file(other + "/inside", std::string("kept"));
    check_refused(dir, other, "it is a folder");
    std::filesystem::remove_all(other);
  }
  SUBCASE("a device: /dev/zero, and one with a journal's name") {
    const Outcome refused = finish_refused("/dev/zero");
    CHECK(refused.message == "/dev/zero is not a commit journal of this user's facegen (it is a character device); nothing was changed");
    CHECK(refused.bytes_read < (1 << 20));
    if (::geteuid() == 0) {
      REQUIRE(::mknod(other.c_str(), S_IFCHR | 0600, makedev(1, 5)) == 0);
      check_refused(dir, other, "it is a character device");
      ::unlink(other.c_str());
    }
  }
  SUBCASE("writable by its group or by others") {
    for (mode_t mode : {mode_t{0620}, mode_t{0602}, mode_t{0666}}) {
      CAPTURE(mode);
      REQUIRE(::chmod(real.c_str(), mode) == 0);
      char octal[8];
      std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
      check_refused(dir, real, std::string("its mode ") + octal + " lets its group or others write it");
    }
    REQUIRE(::chmod(real.c_str(), 0600) == 0);
  }
  SUBCASE("another user's") {
    if (::geteuid() == 0) {
      REQUIRE(::chown(real.c_str(), 4242, 4242) == 0);
      check_refused(dir, real, "it belongs to uid 4242, and facegen runs as uid 0");
      REQUIRE(::chown(real.c_str(), 0, 0) == 0);
    } else {
      MESSAGE("skipped: changing a file's owner needs root");
    }
  }
  SUBCASE("a second link of a real journal") {
    REQUIRE(::link(real.c_str(), other.c_str()) == 0);
    check_refused(dir, other, "it has 2 hard links, where facegen's has one");
    ::unlink(other.c_str());
  }
  SUBCASE("huge files: refused before or at their first entry, never read whole") {
    // A sparse file of 4 GiB, one with a journal's header, and one of 512 MiB whose header claims
    // entries enough for its size (its first entry is zeros).
    const std::vector<std::pair<std::string, uint64_t>> huge = {
        {"", uint64_t{4} << 30}, {journal_text("Zz9Zz9", {}), uint64_t{4} << 30}, {journal_text("Zz9Zz9", {}), uint64_t{64} << 20}};
    const std::vector<std::string> why = {
        "it is 4,294,967,296 bytes, more than the 1,073,741,824 of the largest journal",
        "it is 4,294,967,296 bytes, more than the 1,073,741,824 of the largest journal",
        "it records no output"};
    for (size_t i = 0; i < huge.size(); ++i) {
      CAPTURE(i);
      write_file(other, huge[i].first);
      REQUIRE(::truncate(other.c_str(), static_cast<off_t>(huge[i].second)) == 0);
      check_refused(dir, other, why[i]);
    }
    std::string header = "facegen commit journal 1\nstate P\ntoken Zz9Zz9\nentries 1\n";
    write_file(other, header);
    REQUIRE(::truncate(other.c_str(), 64 << 20) == 0);
    check_refused(dir, other, "it is 67,108,864 bytes, more than 1 entries take");
    header = "facegen commit journal 1\nstate P\ntoken Zz9Zz9\nentries 1000000\n";
    write_file(other, header);
    REQUIRE(::truncate(other.c_str(), 512 << 20) == 0);
    check_refused(dir, other, "entry 1 of 1,000,000 is malformed or cut short");
    ::unlink(other.c_str());
  }
  SUBCASE("not of facegen's form") {
    const std::string r_txt = entry_line("F", 1, 12, "r.txt.tmp-aaaaaa", "r.txt");
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"", "it is empty"},
        {"hello\n", "its first line is not \"facegen commit journal 1\""},
        {"facegen commit journal 2\nstate P\n", "its first line is not \"facegen commit journal 1\""},
        {"facegen commit journal 1\nstate X\ntoken Zz9Zz9\nentries 1\n", "its state line is not \"state P\" or \"state D\""},
        {journal_text("Zz9Zz8", {r_txt}), "its token Zz9Zz8 is not the end of its name, Zz9Zz9"},
        {journal_text("Zz9$z9", {r_txt}), "its token line is not \"token [TAG-]XXXXXX\" of letters and digits"},
        {journal_text("Zz9Zz9", {}), "it records no output"},
        {"facegen commit journal 1\nstate P\ntoken Zz9Zz9\nentries 01\n" + r_txt, "its entries line is not \"entries N\""},
        {journal_text("Zz9Zz9", {r_txt}) + "more", "it goes on after its last entry"},
        {journal_text("Zz9Zz9", {"X 1 12 16 5\nr.txt.tmp-aaaaaar.txt\n"}), "entry 1 of 1 is malformed or cut short"},
        {journal_text("Zz9Zz9", {"F 1 12 16 5\nr.txt.tmp-aaaaaar.txt"}), "entry 1 of 1 is malformed or cut short"},
        {journal_text("Zz9Zz9", {"F 1 0 16 5\nr.txt.tmp-aaaaaar.txt\n"}), "entry 1 of 1 is malformed or cut short"},
        {journal_text("Zz9Zz9", {"F  1 12 16 5\nr.txt.tmp-aaaaaar.txt\n"}), "entry 1 of 1 is malformed or cut short"},
    };
    for (const auto& [text, why] : bad) {
      CAPTURE(text);
      write_file(other, text);
      check_refused(dir, other, why);
    }
    ::unlink(other.c_str());
  }
  SUBCASE("naming what facegen does not write") {
    const std::string kNotOutput = ", not a name facegen gives an output in its folder";
    const uint64_t inode = inode_of(dir.file("r-1.bmp.tmp-bbbbbb"));
    const std::vector<std::pair<std::string, std::string>> bad = {
        {entry_line("F", 1, inode, "r.txt.tmp-aaaaaa", "../r.txt"), "entry 1 of 1 names the output ../r.txt" + kNotOutput},
        {entry_line("F", 1, inode, "...tmp-aaaaaa", ".."), "entry 1 of 1 names the output .." + kNotOutput},
        {entry_line("F", 1, inode, "r.txt.tmp-aaaaaa", ".facegen-old-" + token + "-0"),
         "entry 1 of 1 names the output .facegen-old-" + token + "-0" + kNotOutput},
        {entry_line("F", 1, inode, "r.txt.tmp-aaaaaa", ".facegen-old-zzzzzz-1"), "entry 1 of 1 names the output .facegen-old-zzzzzz-1" + kNotOutput},
        {entry_line("D", 1, inode, "r.txt.tmp-aaaaaa", ".facegen-commit-Zz9Zz9"), "entry 1 of 1 names the output .facegen-commit-Zz9Zz9" + kNotOutput},
        {entry_line("F", 1, inode, ".facegen-old-" + token + "-1", "r-1.bmp"), "entry 1 of 1 names a temporary that is not r-1.bmp.tmp-XXXXXX"},
        {entry_line("F", 1, inode, "r.txt", "r-1.bmp"), "entry 1 of 1 names a temporary that is not r-1.bmp.tmp-XXXXXX"},
        {entry_line("F", 1, inode, "r.txt.tmp-aaaaaa", "r-1.bmp"), "entry 1 of 1 names a temporary that is not r-1.bmp.tmp-XXXXXX"},
        {entry_line("F", 1, inode, "r-1.bmp.tmp-bbbbb", "r-1.bmp"), "entry 1 of 1 names a temporary that is not r-1.bmp.tmp-XXXXXX"},
        {entry_line("F", 1, inode, "r-1.bmp.tmp-bbb.bb", "r-1.bmp"), "entry 1 of 1 names a temporary that is not r-1.bmp.tmp-XXXXXX"},
        {entry_line("F", 1, inode, "r-1.bmp.tmp-TAG-bbbbbb", "r-1.bmp"), "entry 1 of 1 names a temporary that is not r-1.bmp.tmp-XXXXXX"},
        // Shortened where the whole name fits: not a name facegen gives.
        {entry_line("F", 1, inode, "r-1.tmp-bbbbbb", "r-1.bmp"), "entry 1 of 1 names a temporary that is not r-1.bmp.tmp-XXXXXX"},
        {entry_line("F", 1, inode, ".tmp-bbbbbb", "r-1.bmp"), "entry 1 of 1 names a temporary that is not r-1.bmp.tmp-XXXXXX"},
    };
    for (const auto& [entry, why] : bad) {
      CAPTURE(entry);
      write_file(other, journal_text("Zz9Zz9", {entry}));
      check_refused(dir, other, why);
    }
    write_file(other, journal_text("Zz9Zz9", {entry_line("F", 1, inode, "r-1.bmp.tmp-bbbbbb", "r-1.bmp"),
                                              entry_line("F", 1, inode, "r-1.bmp.tmp-bbbbbb", "r-1.bmp")}));
    check_refused(dir, other, "entry 2 of 2 names what entry 1 names");
    // A tagged token: its temporaries carry the tag.
    const std::string tagged = dir.file(std::string(kCommitJournalPrefix) + "job7-Zz9Zz9");
    write_file(tagged, journal_text("job7-Zz9Zz9", {entry_line("F", 1, inode, "r-1.bmp.tmp-bbbbbb", "r-1.bmp")}));
    check_refused(dir, tagged, "entry 1 of 1 names a temporary that is not r-1.bmp.tmp-job7-XXXXXX");
    ::unlink(tagged.c_str());
    ::unlink(other.c_str());
  }
  SUBCASE("a name that is not a journal's, and a missing one") {
    const std::string plain = dir.file("notes");
    write_file(plain, real_text);
    const std::map<std::string, std::string> before = snapshot(dir.path);
    CHECK(finish_refused(plain).message ==
          plain + " is not a commit journal of this user's facegen (its name does not begin with .facegen-commit-); nothing was changed");
    CHECK(snapshot(dir.path) == before);
    ::unlink(plain.c_str());
    CHECK(contains(user_error_of([&] { finish_commit(dir.file("none")); }), "cannot open commit journal"));
  }
  // The real journal, never touched by any of the above, still finishes the commit.
  ::close(held);
  CHECK(read_file(real) == real_text);
  CHECK(finish_commit(real).outcome == FinishOutcome::NewInPlace);
  check_new_set(dir);
}

TEST_CASE("commit journal: recovery touches only what the journal recorded") {
  TempDir dir;
  TempDir elsewhere;  // a victim's files, that links in the directory point to
  write_file(elsewhere.file("precious"), std::string("precious"));
  std::filesystem::create_directory(elsewhere.file("folder"));
  write_file(elsewhere.file("folder/000000.png"), std::string("a png of someone else"));
  const std::map<std::string, std::string> victim = snapshot(elsewhere.path);

  SUBCASE("a temporary whose kind differs from the entry's is neither renamed nor removed") {
    // A file's entry whose temporary is a folder of the recorded inode, and a folder's entry whose
    // temporary is a file of it: no new output is there, so the commit is undone, touching neither.
    std::filesystem::create_directory(dir.file("r.txt.tmp-aaaaaa"));
    write_file(dir.file("r.txt.tmp-aaaaaa/000000.png"), std::string("kept"));
    write_file(dir.file("s.tmp-bbbbbb"), std::string("kept too"));
    write_file(dir.file(std::string(kCommitJournalPrefix) + "Zz9Zz9"),
               journal_text("Zz9Zz9", {entry_line("F", 0, inode_of(dir.file("r.txt.tmp-aaaaaa")), "r.txt.tmp-aaaaaa", "r.txt"),
                                       entry_line("D", 0, inode_of(dir.file("s.tmp-bbbbbb")), "s.tmp-bbbbbb", "s")}));
    REQUIRE(::chmod(dir.file(std::string(kCommitJournalPrefix) + "Zz9Zz9").c_str(), 0600) == 0);
    std::map<std::string, std::string> before = snapshot(dir.path);
    before.erase(dir.file(std::string(kCommitJournalPrefix) + "Zz9Zz9"));
    CHECK(finish_commit(dir.file(std::string(kCommitJournalPrefix) + "Zz9Zz9")).outcome == FinishOutcome::OldInPlace);
    CHECK(snapshot(dir.path) == before);
  }
  SUBCASE("a temporary of another inode is neither renamed nor removed") {
    const std::vector<PendingRename> renames = write_old_and_new(dir);
    REQUIRE(commit_killed_at(renames, 4));  // r.txt replaced; r-1.bmp not yet
    const std::string other_file = dir.file("r-1.bmp.tmp-bbbbbb");
    write_file(dir.file("replacement"), std::string("not the new output"));
    REQUIRE(::rename(dir.file("replacement").c_str(), other_file.c_str()) == 0);
    const std::vector<std::string> journals = journals_in(dir);
    REQUIRE(journals.size() == 1);
    CHECK(finish_commit(journals[0]).outcome == FinishOutcome::OldInPlace);
    CHECK(dir.names() == std::vector<std::string>{"r", "r-1.bmp", "r-1.bmp.tmp-bbbbbb", "r.txt"});
    CHECK(read_file(other_file) == "not the new output");
    CHECK(read_file(dir.file("r.txt")) == earlier_text("old text"));
    CHECK(read_file(dir.file("r-1.bmp")) == earlier_output(WrittenKind::Bmp, "old bmp 1"));
    CHECK(read_file(dir.file("r/000000.png")) == "old png");
  }
  SUBCASE("an old folder that holds what facegen did not write, and a backup that is a link, are left") {
    const std::vector<PendingRename> renames = write_old_and_new(dir);
    REQUIRE(commit_killed_at(renames, 7));  // every new output in place; backups and old folder left
    const std::vector<std::string> journals = journals_in(dir);
    REQUIRE(journals.size() == 1);
    const std::string token = base_name(journals[0]).substr(std::strlen(kCommitJournalPrefix));
    REQUIRE(::symlink(elsewhere.file("folder").c_str(), dir.file("r.tmp-dddddd/link-to-folder").c_str()) == 0);
    REQUIRE(::symlink(elsewhere.file("precious").c_str(), dir.file("r.tmp-dddddd/999999.png").c_str()) == 0);
    const std::string backup = dir.file(".facegen-old-" + token + "-1");
    REQUIRE(::unlink(backup.c_str()) == 0);
    REQUIRE(::symlink(elsewhere.file("precious").c_str(), backup.c_str()) == 0);
    const FinishReport report = finish_commit(journals[0]);
    CHECK(report.outcome == FinishOutcome::NewInPlace);
    REQUIRE(report.left.size() == 2);
    CHECK(contains(left_named(report), "; left alone: "));
    CHECK(contains(left_named(report), " and 1 more"));
    CHECK(std::filesystem::is_symlink(backup));
    CHECK(std::filesystem::is_symlink(dir.file("r.tmp-dddddd/link-to-folder")));
    CHECK(std::filesystem::is_symlink(dir.file("r.tmp-dddddd/999999.png")));
    CHECK(!std::filesystem::exists(dir.file("r.tmp-dddddd/000000.png")));  // the old folder's own PNG went
    CHECK(read_file(dir.file("r.txt")) == "new text");
    CHECK(read_file(dir.file("r/000000.png")) == "new png");
  }
  CHECK(snapshot(elsewhere.path) == victim);
}

TEST_CASE("commit journal: a name shortened to fit NAME_MAX is facegen's; outputs are never named by \"\"") {
  TempDir dir;
  const std::string final = std::string(240, 'n') + ".txt";        // 244 bytes: with ".tmp-XXXXXX", 255 fits
  const std::string longer = std::string(246, 'n') + ".txt";       // 250: cut by 6 before ".tmp-"
  write_file(dir.file(final + ".tmp-aaaaaa"), std::string("new"));
  const std::string cut = longer.substr(0, 244) + ".tmp-bbbbbb";
  write_file(dir.file(cut), std::string("new 2"));
  const std::string journal = dir.file(std::string(kCommitJournalPrefix) + "Zz9Zz9");
  write_file(journal, journal_text("Zz9Zz9", {entry_line("F", 0, inode_of(dir.file(final + ".tmp-aaaaaa")), final + ".tmp-aaaaaa", final),
                                              entry_line("F", 0, inode_of(dir.file(cut)), cut, longer)}));
  REQUIRE(::chmod(journal.c_str(), 0600) == 0);
  const FinishReport report = finish_commit(journal);
  CHECK(report.outcome == FinishOutcome::NewInPlace);
  CHECK(outputs_named(report) == final + " and 1 more");
  CHECK(dir.names() == std::vector<std::string>{final, longer});
  CHECK(outputs_named(FinishReport{}) == "outputs");
}

TEST_CASE("commit journal: a temporary shortened to fit PATH_MAX, as the registry names it, is finished") {
  TempDir dir;
  std::string deep = dir.path;
  while (deep.size() + 201 < 3850) {
    deep += "/" + std::string(200, 'd');
    REQUIRE(std::filesystem::create_directory(deep));
  }
  // The output's path fits PATH_MAX (4,096 with its NUL); its temporary's, 11 bytes longer, does not.
  const std::string final = deep + "/" + std::string(4085 - deep.size() - 5, 'n') + ".txt";
  REQUIRE(final.size() == 4085);
  REQUIRE(base_name(final).size() + 11 <= NAME_MAX);  // the name alone would fit
  std::string temp = final + ".tmp-XXXXXX";
  TempRegistration listed;
  const int fd = create_registered_temp_file(temp, &listed);
  REQUIRE(fd >= 0);
  ::close(fd);
  CHECK(temp.size() < final.size() + 11);  // shortened before ".tmp-"
  REQUIRE(commit_killed_at({{temp, final, false}}, 1));
  std::vector<std::string> journals;
  for (const auto& entry : std::filesystem::directory_iterator(deep))
    if (entry.path().filename().string().rfind(kCommitJournalPrefix, 0) == 0) journals.push_back(entry.path());
  REQUIRE(journals.size() == 1);
  CHECK(finish_commit(journals[0]).outcome == FinishOutcome::NewInPlace);
  CHECK(std::filesystem::exists(final));
  CHECK(!std::filesystem::exists(temp));
  listed.release();
}
