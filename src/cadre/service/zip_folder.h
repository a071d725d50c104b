// Zipping a job's folder for upload (`cadre submit`), with libzip: regular files under `dir`,
// recursively, skipping hidden entries (.git, ...), symbolic links and the folders a job or a
// server writes into (runs/, cadre-data/), so a resubmission does not upload old results.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "cadre/base/status.h"

namespace cadre::service {

// The zip's bytes in *out. kInvalidArgument when the files add up to more than max_bytes.
Status ZipFolder(const std::filesystem::path& dir, uint64_t max_bytes, std::string* out);

}  // namespace cadre::service
