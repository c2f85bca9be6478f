// test_temp_registry.cpp: the temporary-file registry and the handlers of the signals that end a run.
//
// Each signal case runs in a forked child (a handler ends its process): the child lists many
// temporary files (more than any fixed table would hold) and a folder with files and a subfolder,
// then gets the signal; the parent checks how the child ended, its one line on stderr, and that
// nothing but the committed output is left.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commit/atomic_file.hpp"
#include "commit/output_commit.hpp"
#include "common/stop_signals.hpp"
#include "common/temp_registry.hpp"
#include "engine/output_files.hpp"
#include "formats/png_folder_layout.hpp"
#include "test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

struct ChildEnd {
  int status = 0;
  std::string stderr_text;
};

// Runs body in a child whose stderr goes to a file; body ends the child (or returns: status 0).
template <typename Body>
ChildEnd run_in_child(const TempDir& dir, Body body) {
  const std::string err_path = dir.path + ".stderr";
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (int n = 1; n < NSIG; ++n) ::signal(n, SIG_DFL);  // doctest's crash handlers, as a fresh process
    set_outputs_committed(false);  // and no outputs committed yet, whatever earlier tests did here
    const rlimit no_core = {0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err < 0 || ::dup2(err, STDERR_FILENO) < 0) ::_exit(99);
    body();
    ::_exit(0);
  }
  ChildEnd end;
  // A child whose handler never ends (a cleanup that cannot finish) is killed after 60 s: the case
  // fails instead of hanging.
  pid_t ended = 0;
  for (int waited_ms = 0; (ended = ::waitpid(pid, &end.status, WNOHANG)) == 0 && waited_ms < 60000; waited_ms += 10) {
    ::usleep(10000);
  }
  if (ended == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &end.status, 0);
    FAIL_CHECK("the child did not end within 60 s");
  }
  end.stderr_text = read_file(err_path);
  std::filesystem::remove(err_path);
  return end;
}

// Lists 150 temporary files (two committed outputs beside them) and a folder holding 40 files and
// a subfolder with one, the shape of a PNG output; the objects stay alive until the signal.
void make_many_temporaries(const TempDir& dir) {
  auto* files = new std::vector<std::unique_ptr<AtomicFile>>;
  for (int i = 0; i < 150; ++i) {
    files->push_back(std::make_unique<AtomicFile>(dir.file("out" + std::to_string(i) + ".txt")));
    files->back()->write("x", 1);
  }
  AtomicFile done(dir.file("done.txt"));
  done.write("done", 4);
  done.commit();
  std::string pattern = dir.file("images.tmp-XXXXXX");
  auto* folder = new TempRegistration;
  if (!create_registered_temp_folder(pattern, folder)) ::_exit(98);
  for (int i = 0; i < 40; ++i) write_file(pattern + "/" + std::to_string(i) + ".png", "png");
  std::filesystem::create_directory(pattern + "/sub");
  write_file(pattern + "/sub/a.png", "png");
}

bool only_done_left(const TempDir& dir) {
  return dir.names() == std::vector<std::string>{"done.txt"} && read_file(dir.file("done.txt")) == "done";
}

}  // namespace

TEST_CASE("temp registry: entries come and go, and their nodes are reused") {
  TempDir dir;
  const int before = registered_temp_count();
  {
    std::vector<std::unique_ptr<AtomicFile>> files;
    for (int i = 0; i < 100; ++i) files.push_back(std::make_unique<AtomicFile>(dir.file(std::to_string(i))));
    CHECK(registered_temp_count() == before + 100);
    files[7]->write("seven", 5);
    files[7]->commit();
    CHECK(registered_temp_count() == before + 99);
  }
  CHECK(registered_temp_count() == before);
  CHECK(dir.names() == std::vector<std::string>{"7"});
  std::string pattern = dir.file("f.tmp-XXXXXX");
  TempRegistration folder;
  REQUIRE(create_registered_temp_folder(pattern, &folder));
  CHECK(folder.listed());
  CHECK(registered_temp_count() == before + 1);
  TempRegistration moved = std::move(folder);
  CHECK(!folder.listed());
  moved.release();
  CHECK(registered_temp_count() == before);
  std::string missing = dir.file("no/such/dir/x.tmp-XXXXXX");
  TempRegistration none;
  CHECK(create_registered_temp_file(missing, &none) == -1);
  CHECK(!none.listed());
  CHECK(registered_temp_count() == before);
}

TEST_CASE("stop signals: every terminating signal removes every listed file and folder") {
  const std::vector<std::pair<int, const char*>> cases = {
      {SIGINT, "interrupted (SIGINT); temporary files removed"},
      {SIGTERM, "terminated (SIGTERM); temporary files removed"},
      {SIGHUP, "terminated (SIGHUP); temporary files removed"},
      {SIGQUIT, "terminated (SIGQUIT); temporary files removed"},
      {SIGPIPE, "terminated (SIGPIPE); temporary files removed"},
      {SIGALRM, "terminated (SIGALRM); temporary files removed"},
      {SIGUSR1, "terminated (SIGUSR1); temporary files removed"},
      {SIGUSR2, "terminated (SIGUSR2); temporary files removed"},
      {SIGVTALRM, "terminated (SIGVTALRM); temporary files removed"},
      {SIGPROF, "terminated (SIGPROF); temporary files removed"},
      {SIGXCPU, "terminated (SIGXCPU); temporary files removed"},
      {SIGRTMIN + 3, "terminated (SIGRTMIN+3); temporary files removed"},
  };
  for (const auto& [signal_number, message] : cases) {
    CAPTURE(signal_number);
    TempDir dir;
    const ChildEnd end = run_in_child(dir, [&] {
      install_stop_handlers(StopStyle::Message);
      make_many_temporaries(dir);
      ::kill(::getpid(), signal_number);
      ::_exit(97);
    });
    CHECK(WIFEXITED(end.status));
    CHECK(WEXITSTATUS(end.status) == 128 + signal_number);
    CHECK(end.stderr_text == "facegen: " + std::string(message) + "\n");
    CHECK(only_done_left(dir));
  }
}

TEST_CASE("stop signals: a signal while threads fill a folder's subfolders, one TempCreation a grain, removes every file") {
  for (int signal_number : {SIGTERM, SIGINT}) {
    CAPTURE(signal_number);
    TempDir dir;
    const ChildEnd end = run_in_child(dir, [&] {
      install_stop_handlers(StopStyle::Message);
      AtomicFile done(dir.file("done.txt"));
      done.write("done", 4);
      done.commit();
      const int64_t total = 1000000;
      const OutputFile spec{OutputFile::Kind::Folder, dir.file("r"), "", -1, 0, total, {}, OutputFormat::Png,
                            png_longest_relative_path(total, PngLayout::Subfolders, SampleFacts())};
      auto* files = new OutputFiles(FileList{1, [spec](size_t) { return spec; }});
      files->create(0);
      std::atomic<int64_t> made{0};
      for (int t = 0; t < 4; ++t) {
        std::thread([files, &made, t, total] {
          // Until the handler ends the process; at most 20,000 files a thread, should it not.
          for (int64_t first = t * 20000; first < (t + 1) * 20000; first += 32) {
            TempCreation grain;
            for (int64_t i = first; i < first + 32; ++i) {
              files->write_in_folder(0, png_relative_path(i, total, PngLayout::Subfolders, SampleFacts()), "shown", "png");
            }
            made += 32;
          }
        }).detach();
      }
      while (made.load() < 3000) ::usleep(1000);
      ::kill(::getpid(), signal_number);
      for (;;) ::pause();
    });
    CHECK(WIFEXITED(end.status));
    CHECK(WEXITSTATUS(end.status) == 128 + signal_number);
    CHECK(end.stderr_text.find("temporary files removed") != std::string::npos);
    CHECK(only_done_left(dir));
  }
}

TEST_CASE("stop signals: a signal after the commit says that the outputs are in place") {
  TempDir dir;
  const ChildEnd end = run_in_child(dir, [&] {
    install_stop_handlers(StopStyle::Message);
    make_many_temporaries(dir);
    AtomicFile output(dir.file("r.txt"));
    output.write("new", 3);
    output.finish_writing();
    commit_all_or_nothing({{output.temp_path(), dir.file("r.txt"), false}});
    output.mark_committed();
    ::kill(::getpid(), SIGTERM);
    ::_exit(97);
  });
  CHECK(WIFEXITED(end.status));
  CHECK(WEXITSTATUS(end.status) == 128 + SIGTERM);
  CHECK(end.stderr_text == "facegen: terminated (SIGTERM) after its outputs were in place; temporary files removed\n");
}

TEST_CASE("stop signals: a rank dies of the signal itself, silently, after the cleanup") {
  TempDir dir;
  const ChildEnd end = run_in_child(dir, [&] {
    install_stop_handlers(StopStyle::Message);
    install_stop_handlers(StopStyle::DieOfSignal);  // a rank re-installs after MPI_Init
    make_many_temporaries(dir);
    ::kill(::getpid(), SIGTERM);
    ::_exit(97);
  });
  CHECK(WIFSIGNALED(end.status));
  CHECK(WTERMSIG(end.status) == SIGTERM);
  CHECK(end.stderr_text.empty());
  CHECK(only_done_left(dir));
}

TEST_CASE("stop signals: a crash cleans up, then ends as it would have") {
  TempDir dir;
  const ChildEnd end = run_in_child(dir, [&] {
    install_stop_handlers(StopStyle::Message);
    make_many_temporaries(dir);
    std::abort();
  });
  CHECK(WIFSIGNALED(end.status));
  CHECK(WTERMSIG(end.status) == SIGABRT);
  CHECK(end.stderr_text == "facegen: fault: crashed (SIGABRT); temporary files removed\n");
  CHECK(only_done_left(dir));
}

TEST_CASE("stop signals: a SIGBUS on a store into a mapped output (truncated from outside) cleans up") {
  TempDir dir;
  const ChildEnd end = run_in_child(dir, [&] {
    install_stop_handlers(StopStyle::Message);
    make_many_temporaries(dir);
    auto* output = new AtomicFile(dir.file("r.npy"), AtomicFile::Unbuffered{});
    const int fd = ::open(output->temp_path().c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, 1 << 20) != 0) ::_exit(96);
    auto* mapping = static_cast<volatile char*>(::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (mapping == MAP_FAILED || ::ftruncate(fd, 0) != 0) ::_exit(95);
    mapping[4096] = 1;  // past the end of the file now
    ::_exit(94);
  });
  CHECK(WIFSIGNALED(end.status));
  CHECK(WTERMSIG(end.status) == SIGBUS);
  CHECK(end.stderr_text == "facegen: fault: crashed (SIGBUS); temporary files removed\n");
  CHECK(only_done_left(dir));
}

TEST_CASE("stop signals: a path that cannot be removed is named, never called removed") {
  TempDir dir;
  const ChildEnd end = run_in_child(dir, [&] {
    install_stop_handlers(StopStyle::Message);
    make_many_temporaries(dir);
    // Listed as a file but a folder with something in it: unlink fails (EISDIR).
    std::filesystem::create_directories(dir.file("stuck/inner"));
    static TempRegistration stuck = register_temp_path(dir.file("stuck"), TempKind::File);
    ::kill(::getpid(), SIGTERM);
    ::_exit(97);
  });
  CHECK(WIFEXITED(end.status));
  CHECK(WEXITSTATUS(end.status) == 128 + SIGTERM);
  CHECK(end.stderr_text == "facegen: terminated (SIGTERM); could not remove temporary " + dir.file("stuck") + "\n");
  CHECK(dir.names() == std::vector<std::string>{"done.txt", "stuck"});
}

TEST_CASE("stop signals: a signal ignored by the parent stays ignored; SIGXFSZ is ignored") {
  TempDir dir;
  const ChildEnd end = run_in_child(dir, [&] {
    ::signal(SIGHUP, SIG_IGN);  // nohup
    install_stop_handlers(StopStyle::Message);
    make_many_temporaries(dir);
    ::kill(::getpid(), SIGHUP);
    ::kill(::getpid(), SIGXFSZ);
    ::_exit(5);
  });
  CHECK(WIFEXITED(end.status));
  CHECK(WEXITSTATUS(end.status) == 5);
  CHECK(end.stderr_text.empty());
}
