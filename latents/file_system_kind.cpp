// file_system_kind.cpp: the file system kinds that live in one kernel (see file_system_kind.hpp).
#include "latents/file_system_kind.hpp"

namespace facegen {

bool node_local_file_system(int64_t f_type) {
  switch (static_cast<unsigned long>(f_type)) {
    case 0x01021994:  // tmpfs
    case 0xEF53:      // ext2, ext3, ext4
    case 0x58465342:  // xfs
    case 0x9123683E:  // btrfs
    case 0x794C7630:  // overlayfs (a container's root)
      return true;
    default: return false;
  }
}

}  // namespace facegen
