// stb_image_write_impl.cpp: the one translation unit that compiles stb_image_write's implementation.
//
// Every other file includes <stb_image_write.h> for declarations only. The library is third-party
// C code; its one warning under -Wall -Wextra (struct literals that leave fields to zero) is not ours
// to fix, so it is silenced here alone.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
#pragma GCC diagnostic pop
