#!/usr/bin/env bash
# device_packages.sh: on a GPU machine that cannot download, unpack the Debian packages carried in
# .deps/debs (gathered by ../shared/tools/device-deps.sh, or apt-get download) over /, where a header
# the build needs is missing; on a machine that has them all (this project's own), nothing is touched.
# Sourced by the GPU round scripts (bench/engine_round.sh, bench/fp32_wgmma_round.sh).
facegen_missing_headers=
for header in cxxopts.hpp doctest/doctest.h fast_float/fast_float.h libdeflate.h asio.hpp xxhash.h \
              stb/stb_image.h nlohmann/json.hpp; do
  [ -f "/usr/include/$header" ] || facegen_missing_headers="$facegen_missing_headers $header"
done
if [ -n "$facegen_missing_headers" ] && [ -d .deps/debs ]; then
  echo "unpacking .deps/debs for:$facegen_missing_headers"
  for f in .deps/debs/*.deb; do dpkg -x "$f" / 2> /dev/null; done
fi
