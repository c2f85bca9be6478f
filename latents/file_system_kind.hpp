// file_system_kind.hpp: whether a file system lives in one kernel (a node's own disk or memory) or is
// served to many nodes (NFS, Lustre, GPFS, BeeGFS, CephFS, ...).
//
// It decides two things: whether ranks of one host may share a file through mapped writes (one page
// cache), and whether an inode number seen on two nodes can name one file (a served file system
// shows every client the server's inode numbers; two nodes' own disks number their files each on
// its own, so the same number there means nothing). Known one-kernel kinds: tmpfs, ext2/3/4, xfs,
// btrfs, overlayfs (a container's root); anything else counts as served.
#pragma once

#include <cstdint>

namespace facegen {

// `f_type`: statfs's f_type of the file system.
bool node_local_file_system(int64_t f_type);

}  // namespace facegen
