// Safe extraction of an uploaded zip (a job's code) with libzip.
//
// Refused, with a message naming the entry: absolute paths, `..` components, backslashes,
// symbolic links and other special files, more than max_files entries, and more than max_bytes
// once expanded (counted while writing, so a zip that lies about its sizes is caught too). On a
// refusal nothing of the archive is left in `dest`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "cadre/base/status.h"

namespace cadre::service {

struct ZipLimits {
  uint64_t max_bytes = 512ull << 20;
  uint64_t max_files = 10000;
};

// Extracts `archive` (the zip's bytes) into `dest`, which must exist. kInvalidArgument for a
// refused or unreadable archive.
Status ExtractZip(std::string_view archive, const std::filesystem::path& dest,
                  const ZipLimits& limits);

}  // namespace cadre::service
