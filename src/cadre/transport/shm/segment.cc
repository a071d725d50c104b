#include "cadre/transport/shm/segment.h"
#include "cadre/store/store_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

namespace cadre::transport::shm {
namespace {

std::string Errno(int err) { return std::strerror(err); }

std::string FreshName() {
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[64];
  std::snprintf(buf, sizeof buf, "/cadre-%d-%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(r));
  return buf;
}

}  // namespace

SharedSegment::~SharedSegment() { Reset(); }

SharedSegment::SharedSegment(SharedSegment&& other) noexcept { *this = std::move(other); }

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    name_ = std::move(other.name_);
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

void SharedSegment::Reset() {
  Unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

void SharedSegment::Unlink() {
  if (owner_ && !name_.empty()) shm_unlink(name_.c_str());
  owner_ = false;
}

Status SharedSegment::Create(size_t bytes, SharedSegment* out) {
  std::string name = FreshName();
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return IoError("shm_open(" + name + ") failed: " + Errno(errno));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return IoError("sizing shared memory " + name + " to " + std::to_string(bytes) +
                   " bytes failed: " + Errno(err));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (data == MAP_FAILED) {
    shm_unlink(name.c_str());
    return IoError("mmap of shared memory " + name + " failed: " + Errno(err));
  }
  SharedSegment seg;
  seg.data_ = data;
  seg.size_ = bytes;
  seg.name_ = std::move(name);
  seg.owner_ = true;
  *out = std::move(seg);
  return Status::Ok();
}

Status SharedSegment::Open(const std::string& name, size_t bytes, SharedSegment* out) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    return IoError("cannot open shared memory " + name + " (" + Errno(errno) +
                   "); are the ranks that share a host name really on one machine?");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    close(fd);
    return IoError("shared memory " + name + " is smaller than the " + std::to_string(bytes) +
                   " bytes expected");
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (data == MAP_FAILED)
    return IoError("mmap of shared memory " + name + " failed: " + Errno(err));
  SharedSegment seg;
  seg.data_ = data;
  seg.size_ = bytes;
  seg.name_ = name;
  *out = std::move(seg);
  return Status::Ok();
}

Status RendezvousSegment(store::Store& store, const SegmentRendezvous& r, bool create,
                         Deadline deadline, SharedSegment* out) {
  if (create) {
    CADRE_RETURN_IF_ERROR(SharedSegment::Create(r.bytes, out));
    r.init();
    auto* stamp = static_cast<SegmentStamp*>(out->data());
    stamp->version = r.stamp.version;
    std::atomic_thread_fence(std::memory_order_release);
    stamp->magic = r.stamp.magic;
    store.set_string(r.key, out->name());
    return Status::Ok();
  }
  try {
    store.wait({r.key}, deadline.remaining());
  } catch (const Error& e) {
    return store::StoreWaitError(
        e, "shared memory rendezvous: " + r.creator + " did not publish its segment",
        r.creator + " published its shared memory segment");
  }
  const std::string name = store.get_string(r.key);
  CADRE_RETURN_IF_ERROR(SharedSegment::Open(name, r.bytes, out));
  const auto* stamp = static_cast<const SegmentStamp*>(out->data());
  if (stamp->magic != r.stamp.magic || stamp->version != r.stamp.version || !r.matches()) {
    return ProtocolError("shared memory segment " + name + " of " + r.creator +
                         " has another layout (different cadre version or settings)");
  }
  return Status::Ok();
}

}  // namespace cadre::transport::shm
