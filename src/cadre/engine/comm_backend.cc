#include "cadre/engine/comm_backend.h"

#include "cadre/comm/collectives.h"

namespace cadre::engine {

void CommBackend::AllgatherFixed(const void* in, void* out, size_t bytes) {
  comm::AllgatherOptions o;
  o.input = in;
  o.output = out;
  o.counts.assign(size(), bytes);
  o.dtype = DataType::kUInt8;
  comm::Allgather(*comm_, o);
}

void CommBackend::Allgather(const void* in, void* out, const std::vector<size_t>& counts,
                            DataType dtype) {
  comm::AllgatherOptions o;
  o.input = in;
  o.output = out;
  o.counts = counts;
  o.dtype = dtype;
  comm::Allgather(*comm_, o);
}

void CommBackend::Allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) {
  comm::AllreduceOptions o;
  o.input = buffer;
  o.output = buffer;
  o.count = count;
  o.dtype = dtype;
  o.op = op;
  comm::Allreduce(*comm_, o);
}

void CommBackend::Broadcast(void* buffer, size_t count, DataType dtype, int root) {
  comm::BroadcastOptions o;
  o.buffer = buffer;
  o.count = count;
  o.dtype = dtype;
  o.root = root;
  comm::Broadcast(*comm_, o);
}

void CommBackend::Alltoall(const void* in, void* out, const std::vector<size_t>& send_counts,
                           const std::vector<size_t>& recv_counts, DataType dtype) {
  comm::AlltoallOptions o;
  o.input = in;
  o.output = out;
  o.send_counts = send_counts;
  o.recv_counts = recv_counts;
  o.dtype = dtype;
  comm::Alltoall(*comm_, o);
}

void CommBackend::ReduceScatter(const void* in, void* out, const std::vector<size_t>& counts,
                                DataType dtype, ReduceOp op) {
  comm::ReduceScatterOptions o;
  o.input = in;
  o.output = out;
  o.counts = counts;
  o.dtype = dtype;
  o.op = op;
  comm::ReduceScatter(*comm_, o);
}

}  // namespace cadre::engine
