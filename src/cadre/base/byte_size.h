// Byte counts written by people: "4096", "16M", "256KiB", "0.5M", "1G". The one parser of sizes
// on cadre's command lines: `cadre bench allreduce|ps`, ddl_allreduce_bench, mpi_allreduce,
// single_copy_allreduce, and Python's (cadre._core.parse_byte_size: `python3 -m cadre.ps bench`,
// bench/compare_allreduce).
#pragma once

#include <cstdint>
#include <string_view>

#include "cadre/base/status.h"

namespace cadre {

// A number (decimals allowed) with an optional binary unit: none or B; K, k or KiB (1024); M or
// MiB (2^20); G or GiB (2^30). kInvalidArgument quoting `text` for anything else, and for a
// count that is not a whole number of bytes, is negative, or exceeds 2^50 (1 PiB).
Status ParseByteSize(std::string_view text, uint64_t* bytes);

}  // namespace cadre
