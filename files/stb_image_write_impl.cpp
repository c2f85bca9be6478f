// stb_image_write_impl.cpp: the one translation unit that compiles stb_image_write's implementation.
//
// Every other file includes <stb_image_write.h> for declarations only. The library is third-party
// C code; its one warning under -Wall -Wextra (struct literals that leave fields to zero) is not ours
// to fix, so it is silenced here alone.
//
// Out of memory: the library asserts on a failed realloc and then writes through the null pointer.
// Its allocations go through the functions below instead, which throw std::bad_alloc (this file is
// C++), so a failed allocation while encoding is reported like any other (exit 3, temporary files
// removed). The blocks that one encoding had already taken are not freed on that path; the run
// ends there. Its assertions throw too, instead of aborting the process.
#include <cstdlib>
#include <new>
#include <stdexcept>

namespace {

void* stbiw_malloc_or_throw(size_t bytes) {
  void* block = std::malloc(bytes);
  if (block == nullptr) throw std::bad_alloc();
  return block;
}

void* stbiw_realloc_or_throw(void* block, size_t bytes) {
  void* grown = std::realloc(block, bytes);
  if (grown == nullptr) throw std::bad_alloc();
  return grown;
}

}  // namespace

#define STBIW_MALLOC(bytes) stbiw_malloc_or_throw(bytes)
#define STBIW_REALLOC(block, bytes) stbiw_realloc_or_throw(block, bytes)
#define STBIW_FREE(block) std::free(block)
#define STBIW_ASSERT(x) ((x) ? (void)0 : throw std::logic_error("stb_image_write: assertion failed: " #x))

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
#pragma GCC diagnostic pop
