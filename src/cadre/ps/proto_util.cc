#include "cadre/ps/proto_util.h"

#include <grpc/grpc.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cstdlib>
#include <cstring>

namespace cadre::ps {

grpc::StatusCode ToGrpcCode(Code code) {
  switch (code) {
    case Code::kOk:
      return grpc::StatusCode::OK;
    case Code::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case Code::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case Code::kAlreadyExists:
      return grpc::StatusCode::ALREADY_EXISTS;
    case Code::kTimeout:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case Code::kIo:
      return grpc::StatusCode::UNAVAILABLE;
    case Code::kProtocol:
      return grpc::StatusCode::INTERNAL;
    case Code::kAuth:
      return grpc::StatusCode::UNAUTHENTICATED;
    case Code::kMismatch:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case Code::kAborted:
      return grpc::StatusCode::ABORTED;
    case Code::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case Code::kInternal:
      return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::UNKNOWN;
}

Code FromGrpcCode(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return Code::kOk;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return Code::kInvalidArgument;
    case grpc::StatusCode::NOT_FOUND:
      return Code::kNotFound;
    case grpc::StatusCode::ALREADY_EXISTS:
      return Code::kAlreadyExists;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Code::kTimeout;
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return Code::kAuth;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return Code::kMismatch;
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::CANCELLED:
      return Code::kAborted;
    case grpc::StatusCode::UNAVAILABLE:
      return Code::kIo;
    default:
      return Code::kInternal;
  }
}

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(ToGrpcCode(status.code()), status.message());
}

Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return Status::Ok();
  return Status(FromGrpcCode(status.error_code()), status.error_message());
}

void ToProto(const OptimizerConfig& c, proto::OptimizerConfig* out) {
  out->set_kind(OptimizerKindName(c.kind));
  out->set_lr(c.lr);
  out->set_momentum(c.momentum);
  out->set_dampening(c.dampening);
  out->set_nesterov(c.nesterov);
  out->set_beta1(c.beta1);
  out->set_beta2(c.beta2);
  out->set_eps(c.eps);
  out->set_weight_decay(c.weight_decay);
}

Status FromProto(const proto::OptimizerConfig& c, OptimizerConfig* out) {
  CADRE_RETURN_IF_ERROR(ParseOptimizerKind(c.kind(), &out->kind));
  out->lr = c.lr();
  out->momentum = c.momentum();
  out->dampening = c.dampening();
  out->nesterov = c.nesterov();
  out->beta1 = c.beta1();
  out->beta2 = c.beta2();
  out->eps = c.eps();
  out->weight_decay = c.weight_decay();
  return Status::Ok();
}

PartitionRef FromProto(const proto::PartitionId& id) {
  return {id.variable(), id.index(), id.offset(), id.count()};
}

namespace {

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

Status BytesToFloats(const std::string& bytes, const char* field, std::vector<float>* out) {
  if (bytes.size() % sizeof(float) != 0)
    return InvalidArgument(std::string("optimizer state.") + field + ": " +
                           std::to_string(bytes.size()) + " bytes are not whole float32 values");
  out->resize(bytes.size() / sizeof(float));
  std::memcpy(out->data(), bytes.data(), bytes.size());
  return Status::Ok();
}

}  // namespace

void ToProto(const OptimizerState& state, proto::PartitionState* out) {
  out->set_steps(state.steps);
  out->set_buf(FloatBytes(state.buf));
  out->set_sq(FloatBytes(state.sq));
}

Status FromProto(const proto::PartitionState& in, OptimizerState* out) {
  out->steps = in.steps();
  CADRE_RETURN_IF_ERROR(BytesToFloats(in.buf(), "buf", &out->buf));
  return BytesToFloats(in.sq(), "sq", &out->sq);
}

void ToProto(const PartitionRef& id, proto::PartitionId* out) {
  out->set_variable(id.variable);
  out->set_index(id.index);
  out->set_offset(id.offset);
  out->set_count(id.count);
}

namespace {

// glibc gives the top of a heap back to the kernel (madvise) once more than M_TRIM_THRESHOLD is
// free there, and serves allocations above M_MMAP_THRESHOLD with fresh mappings. Both start at 128
// KiB and rise only when a mapped chunk of up to 32 MiB is freed. gRPC allocates the bytes it reads
// from a socket in slices of up to a few MiB and frees them once decrypted: at the small thresholds
// nearly every such free trimmed its thread's heap and the next read faulted the pages back in
// (~18,000 page faults, ~8% of the CPU time per 64 MiB step at 2 servers x 2 workers;
// docs/benchmarks.md, parameter servers). Start at the values glibc's own adjustment tops out at
// (mappings from 32 MiB, trim above 64 MiB) instead. Once per process, and not where the user tuned
// malloc through the environment.
void KeepTransferBuffersMapped() {
#ifdef __GLIBC__
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return;
  for (const char* v : {"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_"})
    if (std::getenv(v) != nullptr) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

}  // namespace

void HoldGrpcLibrary() {
  static const bool held = [] {
    KeepTransferBuffersMapped();
    grpc_init();
    return true;
  }();
  (void)held;
}

}  // namespace cadre::ps
