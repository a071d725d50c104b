// SharedSegment: a named POSIX shared-memory mapping that the ranks on one host all map.
//
// The creator picks a unique name, sizes the file and maps it; the others open the same name.
// Once every rank has mapped it the creator unlinks the name, so nothing is left in /dev/shm
// even if a rank is later killed. Ownership: the mapping is unmapped on destruction; move-only.
//
// RendezvousSegment is the start-up every user of a segment (ShmGroup, ShmMesh) goes through:
// one rank creates and lays out the segment and publishes its name in the store, the others map
// it and check that its layout is the one they expect.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/store/store.h"

namespace cadre::transport::shm {

class SharedSegment {
 public:
  SharedSegment() = default;
  ~SharedSegment();
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  // Creates a zero-filled segment of `bytes` under a fresh unique name (see name()).
  static Status Create(size_t bytes, SharedSegment* out);
  // Maps an existing segment; fails with kIo naming the segment when it is gone or too small.
  static Status Open(const std::string& name, size_t bytes, SharedSegment* out);

  // Removes the name from /dev/shm; existing mappings stay valid. Idempotent.
  void Unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void Reset();

  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;  // created it, so unlinks it
};

// The first words of a segment's header. The creator writes the magic last, after the rest of
// the layout, so a rank that maps a segment of another cadre version, or of other settings,
// refuses it instead of reading it.
struct SegmentStamp {
  uint32_t magic = 0;
  uint32_t version = 0;
};

// How the ranks of one host meet on one segment.
struct SegmentRendezvous {
  std::string key;      // store key the creator publishes the segment's name under
  std::string creator;  // names the creating rank in errors ("rank 0 (host a)")
  size_t bytes = 0;     // the segment's size; every rank computes the same
  SegmentStamp stamp;   // what the creator writes at offset 0, after init
  // The creator's layout of the zero-filled mapping (placement-new of its header and states);
  // runs once *out holds the mapping, before the stamp is written and the name published.
  std::function<void()> init;
  // Whether the creator's settings in the header (sizes, rank count) are this rank's; runs once
  // *out holds the mapping and the stamp matched.
  std::function<bool()> matches;
};

// Collective over the ranks of one host: the creator (`create`) makes the segment, lays it out
// and publishes its name; every other rank waits for the name until `deadline` (the error names
// r.creator, or blames the store when the store itself failed), maps the segment and checks its
// stamp and settings (kProtocol when they differ). The creator unlinks the name later, once every
// rank has mapped it (SharedSegment::Unlink).
Status RendezvousSegment(store::Store& store, const SegmentRendezvous& r, bool create,
                         Deadline deadline, SharedSegment* out);

}  // namespace cadre::transport::shm
