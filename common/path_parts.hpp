// path_parts.hpp: the directory and the last name of a path, as the output files use them (no
// normalisation: "a/b" -> "a" and "b", "b" -> "." and "b", "/b" -> "/" and "b").
#pragma once

#include <string>

namespace facegen {

inline std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

inline std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace facegen
