// pwrite_fully.hpp: a positioned write of any size, whole or failed.
//
// The output engine writes a file from one thread at a time (engine/output_engine.hpp): Linux takes a
// file's inode lock for every write, so writers of one file go one at a time however many there are,
// and those that wait spin (one H200 machine, 2026-11-27: a bf16 tar job that wrote pieces of one
// shard from several threads at once spent 23-33 s of system time for 1M images; with one writer a
// file, 10 s). One pwrite per piece of a file is the fastest way there is to write it.
#pragma once

#include <cstdint>

namespace facegen {

// Writes `bytes` bytes of `data` at `offset` of `fd` with pwrite (1 GiB a call, EINTR retried);
// *err is 0 or the failed call's errno (ENOSPC for a write that wrote nothing).
void pwrite_fully(int fd, int64_t offset, const void* data, int64_t bytes, int* err);

}  // namespace facegen
