// temp_registry.hpp: the one list of a process's temporary files and folders, which every way out of
// a run goes through.
//
// A run writes its outputs under temporary names (PREFIX.txt.tmp-XXXXXX, a PNG folder
// PREFIX.tmp-XXXXXX/) and renames them into place at the end. Their owners remove them on a normal or
// an error exit (destructors, also after std::bad_alloc); a signal that ends the process cannot run
// destructors, so every temporary path is also listed here, and remove_registered_temps() removes
// what is listed from a signal handler (files unlinked, folders emptied and removed).
//
// The list has no fixed size: each entry is a node allocated when it is first needed (before the file
// is created, so running out of memory never leaves an unlisted file) and reused after its entry is
// released. The handler only reads nodes, through atomics, and calls open/getdents64/unlinkat/rmdir.
//
// A file created and listed by one thread while another thread's handler removes the list would be
// missed; every creation therefore happens inside a TempCreation (the thread holds the stop signals,
// and a handler waits for creations under way and stops new ones).
//
// Typical use:
//   std::string pattern = path + ".tmp-XXXXXX";
//   TempRegistration listed;
//   const int fd = create_registered_temp_file(pattern, &listed);   // pattern now names the file
//   ... write, rename into place ...
//   listed.release();   // after the rename (or after the owner removed the file itself)
#pragma once

#include <signal.h>

#include <string>

namespace facegen {

enum class TempKind { File, Folder };  // a folder is removed with everything in it

// One listed path. Moving it moves the entry; destroying or release() takes the path off the list
// (it does not remove the file: the owner has renamed or removed it).
class TempRegistration {
 public:
  TempRegistration() = default;
  ~TempRegistration() { release(); }
  TempRegistration(TempRegistration&& other) noexcept : node_(other.node_) { other.node_ = nullptr; }
  TempRegistration& operator=(TempRegistration&& other) noexcept;
  TempRegistration(const TempRegistration&) = delete;
  TempRegistration& operator=(const TempRegistration&) = delete;

  void release() noexcept;
  bool listed() const { return node_ != nullptr; }

 private:
  friend TempRegistration register_temp_path(const std::string& path, TempKind kind);
  friend int create_registered_temp_file(std::string& pattern, TempRegistration* registration);
  friend bool create_registered_temp_folder(std::string& pattern, TempRegistration* registration,
                                            size_t inner_bytes);
  void* node_ = nullptr;
};

// While one lives, this thread holds the signals that end a run (the handler then runs in another
// thread, which waits until the creation is over) and a handler that already started parks the
// thread for good (the process is about to end). Cheap (two sigprocmask calls) and nests for free: a
// writer of many files may hold one around a run of them (a few milliseconds at most: a handler waits
// up to 2 s) and each file's own TempCreation inside it then costs nothing.
class TempCreation {
 public:
  TempCreation();
  ~TempCreation();
  TempCreation(const TempCreation&) = delete;
  TempCreation& operator=(const TempCreation&) = delete;

 private:
  sigset_t saved_mask_;
};

// While one lives, the listed paths are being renamed into place (an all-or-nothing commit): this
// thread holds the signals that end a run, and a handler in another thread waits for it to end, with
// no time limit (a commit of thousands of files may take seconds; it is a bounded list of renames),
// so that a stop from outside finds the whole old set or the whole new one and no backup or
// temporary name made during the commit. A commit that starts after a handler did parks the thread.
// Does not nest; a crash inside the commit itself is not waited for.
class CommitInProgress {
 public:
  CommitInProgress();
  ~CommitInProgress();
  CommitInProgress(const CommitInProgress&) = delete;
  CommitInProgress& operator=(const CommitInProgress&) = delete;

 private:
  sigset_t saved_mask_;
};

// mkostemp(pattern, O_CLOEXEC) + listing, inside one TempCreation. pattern ends in XXXXXX and names
// the file on return (with FACEGEN_TEMP_TAG set, "-TAG" goes before the XXXXXX: a parallel job's
// launcher knows its ranks' temporaries by it). Returns the descriptor, or -1 with errno set (nothing created, nothing listed).
// Throws std::bad_alloc before creating anything when no node can be had.
int create_registered_temp_file(std::string& pattern, TempRegistration* registration);

// mkdtemp(pattern) + listing as a folder; false with errno set when it cannot be created. The name
// is shortened (as a file's is) so that paths of `inner_bytes` more inside it fit PATH_MAX.
bool create_registered_temp_folder(std::string& pattern, TempRegistration* registration, size_t inner_bytes = 0);

// Lists a path that already exists (or is about to, inside the caller's TempCreation). Throws
// std::bad_alloc; the caller removes what it created if it does.
TempRegistration register_temp_path(const std::string& path, TempKind kind);

// For a signal handler (async-signal-safe, no allocation, no lock): stops new creations and commits,
// waits for a commit under way in another thread and (up to about 2 s) for creations under way, then
// removes every listed path. Returns the number of paths
// that could not be removed (0: nothing listed is left; a path already gone counts as removed) and
// the first of them in first_failure (a pointer into the list, valid until the process ends).
int remove_registered_temps(const char** first_failure) noexcept;

// Said once a commit has put every new output in place; a signal that ends the run afterwards says
// so in its line (async-signal-safe to read).
void set_outputs_committed(bool committed) noexcept;  // true after a commit
bool outputs_committed() noexcept;

// FACEGEN_TEMP_TAG (letters and digits, at most 32; run_parallel.sh sets it to a token of its own),
// or "" when unset or not such a token: put into every temporary name, "r.txt.tmp-TAG-XXXXXX", and
// the commit journal's, so that a job that failed can tell its ranks' files from another run's of
// the same prefix.
const std::string& temp_tag();

// How many paths are listed now (tests).
int registered_temp_count();

}  // namespace facegen
