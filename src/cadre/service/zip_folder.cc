#include "cadre/service/zip_folder.h"

#include <zip.h>

#include <cstdio>
#include <memory>

namespace cadre::service {
namespace fs = std::filesystem;

namespace {

bool Skipped(const fs::path& name) {
  std::string n = name.filename().string();
  return n.starts_with(".") || n == "runs" || n == "cadre-data" || n == "__pycache__";
}

}  // namespace

Status ZipFolder(const fs::path& dir, uint64_t max_bytes, std::string* out) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* buffer = zip_source_buffer_create(nullptr, 0, 0, &error);
  if (buffer == nullptr) return InternalError("libzip: cannot create a buffer");
  zip_t* z = zip_open_from_source(buffer, ZIP_TRUNCATE, &error);
  if (z == nullptr) {
    zip_source_free(buffer);
    return InternalError("libzip: cannot open an archive in memory");
  }
  zip_source_keep(buffer);  // we read it back after zip_close
  auto fail = [&](Status st) {
    zip_discard(z);
    zip_source_free(buffer);
    return st;
  };
  uint64_t total = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  if (ec) return fail(IoError("cannot read " + dir.string() + ": " + ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) return fail(IoError("cannot read " + dir.string() + ": " + ec.message()));
    const fs::directory_entry& entry = *it;
    if (Skipped(entry.path())) {
      if (entry.is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (entry.is_symlink() || !entry.is_regular_file()) continue;
    total += entry.file_size();
    if (total > max_bytes) {
      return fail(InvalidArgument(dir.string() + " holds more than " +
                                  std::to_string(max_bytes >> 20) + " MiB to upload"));
    }
    std::string name = fs::relative(entry.path(), dir).generic_string();
    zip_source_t* file = zip_source_file(z, entry.path().c_str(), 0, -1);
    if (file == nullptr || zip_file_add(z, name.c_str(), file, ZIP_FL_ENC_UTF_8) < 0) {
      if (file != nullptr) zip_source_free(file);
      return fail(IoError("cannot add " + entry.path().string() + ": " + zip_strerror(z)));
    }
  }
  if (zip_close(z) != 0) {
    Status st = IoError(std::string("cannot write the zip: ") + zip_strerror(z));
    zip_discard(z);
    zip_source_free(buffer);
    return st;
  }
  zip_stat_t stat;
  zip_stat_init(&stat);
  if (zip_source_stat(buffer, &stat) != 0 || zip_source_open(buffer) != 0) {
    zip_source_free(buffer);
    return InternalError("libzip: cannot read the archive back");
  }
  out->resize(stat.size);
  zip_int64_t n = zip_source_read(buffer, out->data(), stat.size);
  zip_source_close(buffer);
  zip_source_free(buffer);
  if (n != static_cast<zip_int64_t>(stat.size)) return InternalError("libzip: short read");
  return Status::Ok();
}

}  // namespace cadre::service
