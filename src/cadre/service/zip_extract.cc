#include "cadre/service/zip_extract.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace cadre::service {
namespace fs = std::filesystem;

namespace {

struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct FileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

// Whether `name` stays inside the destination: relative, no `..`, no backslash, no NUL.
bool SafeName(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\\') != std::string::npos) return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string_view part(name.data() + start, end - start);
    if (part == "..") return false;
    start = end + 1;
  }
  return true;
}

Status Refuse(const std::string& entry, const std::string& why) {
  return InvalidArgument("zip entry '" + entry + "' " + why);
}

Status Extract(zip_t* z, const fs::path& dest, const ZipLimits& limits) {
  zip_int64_t count = zip_get_num_entries(z, 0);
  if (count < 0) return InvalidArgument("not a readable zip archive");
  if (static_cast<uint64_t>(count) > limits.max_files) {
    return InvalidArgument("the zip holds " + std::to_string(count) + " entries; at most " +
                           std::to_string(limits.max_files) + " are accepted");
  }
  // Check every name and type before writing anything.
  for (zip_int64_t i = 0; i < count; ++i) {
    const char* raw = zip_get_name(z, static_cast<zip_uint64_t>(i), 0);
    if (raw == nullptr) return InvalidArgument("zip entry " + std::to_string(i) + " has no name");
    std::string name = raw;
    if (!SafeName(name)) return Refuse(name, "points outside the job's folder");
    zip_uint8_t opsys = 0;
    zip_uint32_t attributes = 0;
    if (zip_file_get_external_attributes(z, static_cast<zip_uint64_t>(i), 0, &opsys, &attributes) ==
            0 &&
        opsys == ZIP_OPSYS_UNIX) {
      // Only the type bits matter; many zip writers leave them 0 for plain files.
      mode_t type = (attributes >> 16) & S_IFMT;
      if (type != 0 && type != S_IFREG && type != S_IFDIR) {
        return Refuse(name, type == S_IFLNK ? "is a symbolic link" : "is not a regular file");
      }
    }
  }
  uint64_t written = 0;
  std::vector<char> buffer(1 << 16);
  for (zip_int64_t i = 0; i < count; ++i) {
    std::string name = zip_get_name(z, static_cast<zip_uint64_t>(i), 0);
    fs::path target = dest / name;
    std::error_code ec;
    if (name.back() == '/') {
      fs::create_directories(target, ec);
      if (ec) return IoError("cannot create " + name + ": " + ec.message());
      continue;
    }
    fs::create_directories(target.parent_path(), ec);
    if (ec) return IoError("cannot create the folder of " + name + ": " + ec.message());
    std::unique_ptr<zip_file_t, FileCloser> in(zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0));
    if (!in) return Refuse(name, std::string("cannot be read: ") + zip_strerror(z));
    int fd = open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return IoError("cannot write " + name + ": " + std::strerror(errno));
    for (;;) {
      zip_int64_t n = zip_fread(in.get(), buffer.data(), buffer.size());
      if (n < 0) {
        close(fd);
        return Refuse(name, std::string("is corrupt: ") + zip_file_strerror(in.get()));
      }
      if (n == 0) break;
      written += static_cast<uint64_t>(n);
      if (written > limits.max_bytes) {
        close(fd);
        return InvalidArgument("the zip expands to more than " +
                               std::to_string(limits.max_bytes >> 20) + " MiB (at entry '" + name +
                               "'); refused as a zip bomb");
      }
      if (write(fd, buffer.data(), static_cast<size_t>(n)) != n) {
        close(fd);
        return IoError("cannot write " + name + ": " + std::strerror(errno));
      }
    }
    close(fd);
  }
  return Status::Ok();
}

}  // namespace

Status ExtractZip(std::string_view archive, const fs::path& dest, const ZipLimits& limits) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(archive.data(), archive.size(), 0, &error);
  if (source == nullptr) return InvalidArgument("not a readable zip archive");
  zip_t* raw = zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (raw == nullptr) {
    std::string why = zip_error_strerror(&error);
    zip_source_free(source);
    zip_error_fini(&error);
    return InvalidArgument("not a readable zip archive (" + why + ")");
  }
  zip_error_fini(&error);
  std::unique_ptr<zip_t, ZipCloser> z(raw);
  // Extract into a fresh folder first, so that a refused archive leaves nothing behind.
  fs::path staging = dest / ".unzip";
  std::error_code ec;
  fs::create_directory(staging, ec);
  if (ec) return IoError("cannot create " + staging.string() + ": " + ec.message());
  Status st = Extract(z.get(), staging, limits);
  if (st.ok()) {
    for (const auto& entry : fs::directory_iterator(staging)) {
      fs::rename(entry.path(), dest / entry.path().filename(), ec);
      if (ec) {
        st = IoError("cannot move " + entry.path().filename().string() + ": " + ec.message());
        break;
      }
    }
  }
  fs::remove_all(staging, ec);
  return st;
}

}  // namespace cadre::service
