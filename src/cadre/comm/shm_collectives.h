// Collectives over one host's shared-memory group (transport/shm/group.h).
//
// Every function runs a deterministic number of steps computed from arguments all ranks agree on,
// so the ranks' step numbers stay equal. Each step stamps an OpDescriptor that the peers compare,
// so ranks calling different collectives (or different counts, dtypes, ops, roots) fail with
// kMismatch naming the rank instead of exchanging garbage. Chunks are bounded by the group's slot
// size (and, for allreduce, by `segment_bytes` when non-zero).
#pragma once

#include <cstddef>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/comm/types.h"
#include "cadre/transport/shm/group.h"

namespace cadre::comm::shm_algo {

using transport::shm::ShmGroup;

Status Allreduce(ShmGroup& g, const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                 size_t segment_bytes, Deadline deadline);
Status Broadcast(ShmGroup& g, void* buffer, size_t count, DataType dtype, int root,
                 Deadline deadline);
Status Allgatherv(ShmGroup& g, const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype, Deadline deadline);
Status ReduceScatter(ShmGroup& g, const void* in, void* out, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op, Deadline deadline);
Status Alltoall(ShmGroup& g, const void* in, void* out, const std::vector<size_t>& send_counts,
                const std::vector<size_t>& recv_counts, DataType dtype, Deadline deadline);
Status Barrier(ShmGroup& g, Deadline deadline);

}  // namespace cadre::comm::shm_algo
