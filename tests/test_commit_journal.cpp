// test_commit_journal.cpp: a commit killed (SIGKILL) before each of its changes to the directory is
// finished by another process into one whole set: the new one, or the old one when a new output was
// removed meanwhile; a live commit's journal is left alone; what is not a journal is refused and kept.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "files/commit_journal.hpp"
#include "files/output_commit.hpp"
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

TEST_CASE("commit journal: what is not a journal is refused in one sentence and kept") {
  TempDir dir;
  const std::string header = "facegen commit journal 1\nstate P\ntoken abcdef\nentries 1\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"an empty file", ""},
      {"another header", "facegen commit journal 2\nstate P\n"},
      {"a bad state", "facegen commit journal 1\nstate X\ntoken abcdef\nentries 0\n"},
      {"a count with no entry", header},
      {"an entry cut short", header + "F 1 12 5 5\nr.txt"},
      {"a name with a slash", header + "F 1 12 5 5\n../r.r.txt\n"},
      {"a name that is ..", header + "F 1 12 2 5\n..r.txt\n"},
      {"bytes after the last entry", header + "F 1 12 5 5\nr.tmpr.txt\nmore"},
      {"a kind that is not F or D", header + "X 1 12 5 5\nr.tmpr.txt\n"},
  };
  for (const auto& [what, text] : bad) {
    CAPTURE(what);
    const std::string path = dir.file(std::string(kCommitJournalPrefix) + "abcdef");
    write_file(path, text);
    const std::string message = user_error_of([&] { finish_commit(path); });
    CHECK(contains(message, path + " is not a commit journal of facegen: "));
    CHECK(read_file(path) == text);
    const std::vector<std::string> sentences = finish_dead_commits(dir.path);
    REQUIRE(sentences.size() == 1);
    CHECK(contains(sentences[0], "warning: "));
  }
  CHECK(contains(user_error_of([&] { finish_commit(dir.file("none")); }), "cannot open commit journal"));
}
