// The tensor-carrying messages of ps.proto (PushRequest, PushPullRequest, PullReply) encoded and
// decoded by hand, byte-compatible with protobuf, so that payloads move between gRPC byte buffers
// and tensor memory without protobuf's intermediate strings. Per payload byte:
// - EncodePush:      no copy. The framing goes in small owned slices, each payload is a slice
//                    over the caller's memory, pinned by a PayloadPins (below);
// - DecodePush:      one copy, from the received slices (gRPC hands over a message in pieces of
//                    a few KiB) into a caller's reusable buffer, so that ServerState sees each
//                    chunk contiguous;
// - PullReplyWriter: one copy, from the server's values into the reply's single slice;
// - DecodePullReply: one copy, straight into the caller's tensors.
// protobuf's path copies twice more on each side (into a `bytes` string, then into slices; out
// of the slices into a string, then out of the string) and allocates each string.
//
// The decoders accept anything protobuf would (fields in any order, repeated scalars where the
// last wins, unknown fields skipped) and fail with kProtocol on malformed bytes; checks of the
// content (dtype, extents) stay with ServerState and the client. Private to ps/, like
// proto_util.h. Not thread-safe per object; distinct objects are independent.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/ps/server_state.h"

namespace cadre::ps::wire {

// Keeps count of the slices over caller memory that are still referenced, by a ByteBuffer or
// inside gRPC (which may drop its last reference just after an RPC's completion callback).
// Whoever owns the memory calls WaitReleased() before reusing or freeing it. Thread-safe.
class PayloadPins {
 public:
  PayloadPins();
  // A slice over [data, data + bytes) without a copy; the memory must stay unchanged and alive
  // until WaitReleased() returned.
  grpc::Slice Wrap(const void* data, size_t bytes);
  // Blocks until every slice made by Wrap is gone.
  void WaitReleased();

 private:
  struct Count {
    std::mutex mu;
    std::condition_variable cv;
    int64_t live = 0;
  };
  static void Release(void* count);  // a slice's destroy function; user data: Count's shared_ptr
  std::shared_ptr<Count> count_;
};

// Byte buffers reused across RPCs instead of allocated per RPC (an allocation of a MiB or more is
// fresh pages from the kernel, each faulted in and zeroed): Take() hands out a buffer that keeps
// the capacity, size and (stale) bytes of its earlier use; buffers come back through Give() or,
// for one handed
// to gRPC, when gRPC drops the slice over it. At most `keep_bytes` of idle capacity are kept.
// Thread-safe; held by shared_ptr, so that a slice gRPC drops late still finds its pool.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  static std::shared_ptr<BufferPool> Create(size_t keep_bytes);
  std::unique_ptr<std::string> Take();
  void Give(std::unique_ptr<std::string> buffer);
  // A slice over buffer's bytes (no copy) whose release gives the buffer back.
  grpc::Slice Send(std::unique_ptr<std::string> buffer);

 private:
  explicit BufferPool(size_t keep_bytes) : keep_bytes_(keep_bytes) {}
  struct Sent;
  static void Return(void* sent);
  const size_t keep_bytes_;
  std::mutex mu_;
  std::vector<std::unique_ptr<std::string>> idle_;  // GUARDED_BY(mu_)
  size_t idle_bytes_ = 0;                           // GUARDED_BY(mu_)
};

// One partition of a push: its identity, id.count float32 values at `data`, and the learning
// rate and other hyper-parameters of the update when the caller sets them (TensorChunk.lr,
// TensorChunk.hyper).
struct OutChunk {
  std::string_view variable;
  int32_t index = 0;
  int64_t offset = 0;
  int64_t count = 0;
  const float* data = nullptr;
  std::optional<float> lr;
  std::optional<OptimizerConfig> hyper;
};

// A PushRequest (= PushPullRequest: the same fields) carrying `chunks`. Payloads of at least
// kWrapBytes are wrapped by `pins`, smaller ones are copied into the framing.
inline constexpr size_t kWrapBytes = 4096;
grpc::ByteBuffer EncodePush(int32_t worker, int64_t step, const std::vector<OutChunk>& chunks,
                            PayloadPins& pins);

// A decoded PushRequest; each chunk's data views `scratch`.
struct PushCall {
  int32_t worker = 0;
  int64_t step = 0;
  std::vector<ChunkArgs> chunks;
};
// `scratch` is grown as needed and never shrunk, so a caller that reuses it allocates once.
Status DecodePush(const grpc::ByteBuffer& in, std::string* scratch, PushCall* out);

// Builds a PullReply in one slice, value by value, in a buffer of `pool`.
class PullReplyWriter {
 public:
  // payload_bytes: the values' total size, to reserve once (a smaller guess only costs copies).
  PullReplyWriter(std::shared_ptr<BufferPool> pool, size_t payload_bytes);
  ~PullReplyWriter();  // an unfinished buffer goes back to the pool
  PullReplyWriter(const PullReplyWriter&) = delete;
  PullReplyWriter& operator=(const PullReplyWriter&) = delete;
  void Add(const PartitionRef& id, std::span<const float> values);
  grpc::ByteBuffer Finish();  // once

 private:
  std::shared_ptr<BufferPool> pool_;
  std::unique_ptr<std::string> buf_;
};

// Where one value of a PullReply goes: the partition it must be, and count floats at `dst`.
struct InChunk {
  std::string_view variable;
  int32_t index = 0;
  int64_t count = 0;
  float* dst = nullptr;
};
// Copies the reply's values to their destinations. The reply must hold exactly `expected`, in
// order, each of its size (kProtocol naming the first that differs; a destination may then have
// been written already, as protobuf's path would have too).
Status DecodePullReply(const grpc::ByteBuffer& in, const std::vector<InChunk>& expected);

}  // namespace cadre::ps::wire
