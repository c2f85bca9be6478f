// temp_registry.cpp: the list of temporary files and folders (see temp_registry.hpp).
//
// Nodes form a singly linked list that only grows (newest first) and is never freed: a handler may
// walk it at any moment. A released node goes onto a free list of its size class (under a mutex
// that only registering and releasing threads take) and is reused, so the list is as long as the
// most paths ever listed at once. A node's state says whether the handler may use its path.
#include "common/temp_registry.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "common/stop_signals.hpp"

namespace facegen {
namespace {

enum NodeState : int { kClaimed = 0, kLive = 1 };

struct Node {
  std::atomic<Node*> next{nullptr};  // the list of all nodes; set once, before the node is published
  std::atomic<int> state{kClaimed};
  std::atomic<int> kind{0};          // TempKind
  int size_class = 0;
  Node* next_free = nullptr;         // under g_free_mutex
  std::unique_ptr<char[]> path;      // (1 << size_class) bytes, never reallocated
};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<Node*>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

constexpr int kSmallestClass = 6;  // 64 bytes
constexpr int kSizeClasses = 40;

std::atomic<Node*> g_all{nullptr};
std::mutex g_free_mutex;
Node* g_free[kSizeClasses] = {};
std::atomic<int> g_live{0};

std::atomic<bool> g_stopping{false};  // a handler is removing everything: no creation may start
std::atomic<int> g_creating{0};       // TempCreations under way
std::atomic<long> g_committer{0};     // the thread id of a CommitInProgress, 0 when none

int size_class_for(size_t bytes) {
  int size_class = kSmallestClass;
  while ((size_t{1} << size_class) < bytes) ++size_class;
  return size_class;
}

// A node able to hold a path of path_bytes (with its terminating zero), claimed: the handler skips
// it until publish(). Throws std::bad_alloc.
Node* claim_node(size_t path_bytes) {
  const int size_class = size_class_for(path_bytes);
  std::lock_guard<std::mutex> lock(g_free_mutex);
  if (Node* node = g_free[size_class]) {
    g_free[size_class] = node->next_free;
    node->next_free = nullptr;
    return node;
  }
  auto node = std::make_unique<Node>();
  node->size_class = size_class;
  node->path.reset(new char[size_t{1} << size_class]);
  node->path[0] = '\0';
  Node* raw = node.release();
  raw->next.store(g_all.load(std::memory_order_relaxed), std::memory_order_relaxed);
  g_all.store(raw, std::memory_order_release);  // pushes happen under the mutex: no lost update
  return raw;
}

void publish(Node* node, const std::string& path, TempKind kind) {
  std::memcpy(node->path.get(), path.c_str(), path.size() + 1);
  node->kind.store(static_cast<int>(kind), std::memory_order_relaxed);
  node->state.store(kLive, std::memory_order_release);
  g_live.fetch_add(1, std::memory_order_relaxed);
}

void free_node(Node* node) noexcept {
  std::lock_guard<std::mutex> lock(g_free_mutex);
  node->next_free = g_free[node->size_class];
  g_free[node->size_class] = node;
}

// --- removal, async-signal-safe -------------------------------------------------------------------

struct LinuxDirent64 {  // the record getdents64 fills (linux/dirent.h)
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

bool is_dot_or_dot_dot(const char* name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

// Removes everything inside the open folder dir (depth: how deep this folder is in the listed one).
// Passes over the folder until one removes nothing: unlinking while reading may skip entries.
bool empty_folder(int dir, int depth) {
  alignas(8) char buffer[4096];
  for (;;) {
    if (::lseek(dir, 0, SEEK_SET) < 0) return false;
    bool removed = false;
    for (;;) {
      const long got = ::syscall(SYS_getdents64, dir, buffer, sizeof buffer);
      if (got < 0) return false;
      if (got == 0) break;
      for (long offset = 0; offset < got;) {
        const auto* entry = reinterpret_cast<const LinuxDirent64*>(buffer + offset);
        offset += entry->d_reclen;
        const char* name = entry->d_name;
        if (is_dot_or_dot_dot(name)) continue;
        if (::unlinkat(dir, name, 0) == 0) {
          removed = true;
          continue;
        }
        if (errno == ENOENT) continue;
        if (errno != EISDIR || depth >= 8) return false;
        const int sub = ::openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) return false;
        const bool emptied = empty_folder(sub, depth + 1);
        ::close(sub);
        if (!emptied || ::unlinkat(dir, name, AT_REMOVEDIR) != 0) return false;
        removed = true;
      }
    }
    if (!removed) return true;
  }
}

bool remove_path(const char* path, TempKind kind) {
  if (kind == TempKind::File) return ::unlink(path) == 0 || errno == ENOENT;
  const int dir = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) return errno == ENOENT;
  const bool emptied = empty_folder(dir, 0);
  ::close(dir);
  return emptied && (::rmdir(path) == 0 || errno == ENOENT);
}

}  // namespace

const std::string& temp_tag() {
  static const std::string tag = [] {
    const char* text = std::getenv("FACEGEN_TEMP_TAG");
    if (text == nullptr) return std::string();
    const std::string value = text;
    const bool plain = !value.empty() && value.size() <= 32 &&
                       value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") ==
                           std::string::npos;
    return plain ? value : std::string();
  }();
  return tag;
}

namespace {

void add_temp_tag(std::string& pattern) {
  const std::string& tag = temp_tag();
  if (tag.empty() || pattern.size() < 6 || pattern.compare(pattern.size() - 6, 6, "XXXXXX") != 0) return;
  pattern.insert(pattern.size() - 6, tag + "-");
}

// A temporary name must fit the directory's NAME_MAX even where the final name only just does
// (a prefix of 245 bytes: "P.txt" is 249, "P.txt.tmp-XXXXXX" 260), and the whole path PATH_MAX
// where the final path only just does (a path of 4,090 bytes in deep folders). Where it would not,
// the characters just before ".tmp-" are dropped until it fits (a folder's, with room for the
// `inner_bytes` of the paths it will hold, "/000000.png"). It still ends ".tmp-[TAG-]XXXXXX"
// and is unique (mkstemp); cleanup goes by the registry, or by TAG (run_parallel.sh), not by prefix.
// False (errno ENAMETOOLONG) where the final name, the part before ".tmp-", is itself too long: the
// run could never put the file in place, so it is refused before anything is created.
bool fit_name_max(std::string& pattern, size_t inner_bytes = 0) {
  const size_t slash = pattern.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : pattern.substr(0, slash);
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const long limit = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  const long path_limit = ::pathconf(dir.c_str(), _PC_PATH_MAX);  // counts the terminating NUL
  const size_t marker = pattern.rfind(".tmp-");
  if (marker == std::string::npos || marker < base) return true;
  if ((limit > 0 && marker - base > static_cast<size_t>(limit)) ||
      (path_limit > 0 && marker + inner_bytes + 1 > static_cast<size_t>(path_limit))) {
    errno = ENAMETOOLONG;
    return false;
  }
  const size_t length = pattern.size() - base;
  size_t excess = limit > 0 && length > static_cast<size_t>(limit) ? length - static_cast<size_t>(limit) : 0;
  if (path_limit > 0 && pattern.size() + inner_bytes + 1 > static_cast<size_t>(path_limit)) {
    excess = std::max(excess, pattern.size() + inner_bytes + 1 - static_cast<size_t>(path_limit));
  }
  if (excess > 0 && marker - base > excess) pattern.erase(marker - excess, excess);
  return true;
}

}  // namespace

TempRegistration& TempRegistration::operator=(TempRegistration&& other) noexcept {
  if (this != &other) {
    release();
    node_ = other.node_;
    other.node_ = nullptr;
  }
  return *this;
}

void TempRegistration::release() noexcept {
  if (node_ == nullptr) return;
  TempCreation quiet;  // no handler may run in this thread while it holds the free list's mutex
  Node* node = static_cast<Node*>(node_);
  node_ = nullptr;
  node->state.store(kClaimed, std::memory_order_release);
  g_live.fetch_sub(1, std::memory_order_relaxed);
  free_node(node);
}

namespace {
thread_local int t_creation_depth = 0;  // TempCreations alive in this thread
}  // namespace

// Only the outermost TempCreation of a thread blocks the signals and counts in g_creating: an inner
// one (a file of a run that the caller holds as one creation) costs no system call.
TempCreation::TempCreation() {
  if (t_creation_depth++ > 0) return;
  sigset_t* saved = &saved_mask_;
  ::pthread_sigmask(SIG_BLOCK, &stop_signal_set(), saved);
  g_creating.fetch_add(1);
  if (g_stopping.load()) {
    // A handler is removing the list and will end the process: create nothing more.
    g_creating.fetch_sub(1);
    for (;;) ::pause();
  }
}

TempCreation::~TempCreation() {
  if (--t_creation_depth > 0) return;
  g_creating.fetch_sub(1);
  ::pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr);
}

CommitInProgress::CommitInProgress() {
  ::pthread_sigmask(SIG_BLOCK, &stop_signal_set(), &saved_mask_);
  g_committer.store(::syscall(SYS_gettid));
  if (g_stopping.load()) {
    // A handler is removing the list and will end the process: replace nothing.
    g_committer.store(0);
    for (;;) ::pause();
  }
}

CommitInProgress::~CommitInProgress() {
  g_committer.store(0);
  ::pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr);
}

TempRegistration register_temp_path(const std::string& path, TempKind kind) {
  TempCreation creating;
  TempRegistration registration;
  Node* node = claim_node(path.size() + 1);
  publish(node, path, kind);
  registration.node_ = node;
  return registration;
}

int create_registered_temp_file(std::string& pattern, TempRegistration* registration) {
  add_temp_tag(pattern);
  if (!fit_name_max(pattern)) return -1;
  TempCreation creating;
  Node* node = claim_node(pattern.size() + 1);
  const int fd = ::mkostemp(&pattern[0], O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    free_node(node);
    errno = err;
    return -1;
  }
  publish(node, pattern, TempKind::File);
  *registration = TempRegistration();
  registration->node_ = node;
  return fd;
}

bool create_registered_temp_folder(std::string& pattern, TempRegistration* registration, size_t inner_bytes) {
  add_temp_tag(pattern);
  if (!fit_name_max(pattern, inner_bytes)) return false;
  TempCreation creating;
  Node* node = claim_node(pattern.size() + 1);
  if (::mkdtemp(&pattern[0]) == nullptr) {
    const int err = errno;
    free_node(node);
    errno = err;
    return false;
  }
  publish(node, pattern, TempKind::Folder);
  *registration = TempRegistration();
  registration->node_ = node;
  return true;
}

int remove_registered_temps(const char** first_failure) noexcept {
  g_stopping.store(true);
  // A commit under way in another thread ends first, however long it takes: stopped midway, it would
  // leave part of the new set in place and its backups behind. (In this thread: a crash inside it.)
  const long self = ::syscall(SYS_gettid);
  for (long committer = g_committer.load(); committer != 0 && committer != self; committer = g_committer.load()) {
    const struct timespec one_ms = {0, 1000000};
    ::nanosleep(&one_ms, nullptr);
  }
  // Creations under way finish (at most a few system calls); a thread stuck for 2 s is given up on.
  for (int waited_ms = 0; g_creating.load() != 0 && waited_ms < 2000; ++waited_ms) {
    const struct timespec one_ms = {0, 1000000};
    ::nanosleep(&one_ms, nullptr);
  }
  int failures = 0;
  if (first_failure != nullptr) *first_failure = nullptr;
  for (Node* node = g_all.load(std::memory_order_acquire); node != nullptr;
       node = node->next.load(std::memory_order_relaxed)) {
    if (node->state.load(std::memory_order_acquire) != kLive) continue;
    const int saved_errno = errno;
    const bool removed = remove_path(node->path.get(), static_cast<TempKind>(node->kind.load()));
    errno = saved_errno;
    if (removed) continue;
    if (failures++ == 0 && first_failure != nullptr) *first_failure = node->path.get();
  }
  return failures;
}

int registered_temp_count() { return g_live.load(); }

namespace {
std::atomic<bool> g_outputs_committed{false};
}  // namespace

void set_outputs_committed(bool committed) noexcept { g_outputs_committed.store(committed); }
bool outputs_committed() noexcept { return g_outputs_committed.load(); }

}  // namespace facegen
