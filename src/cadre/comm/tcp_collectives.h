// Collectives over point-to-point transfers (transport/device.h), used between hosts and when
// shared memory is off. Algorithms follow Gloo and MPICH:
// - RingAllreduce: reduce-scatter then allgather around the ring, bandwidth-optimal; blocks are
//   cut into pieces of `segment_bytes` that flow through the steps independently (a piece is
//   forwarded as soon as it has arrived), so the steps overlap and latency is paid about once.
// - HalvingDoublingAllreduce: recursive vector halving (reduce-scatter) then doubling (allgather)
//   among the largest power of two of ranks; the extra ranks first fold their data into a partner
//   and get the result back at the end: 2 log2(p) steps, for latency-bound sizes.
// - RecursiveDoublingAllreduce: log2(p) steps, each exchanging the whole vector with the partner
//   at distance 1, 2, 4, ... (same fold for the extra ranks): the fewest steps, at log2(p) x the
//   bytes of a ring per rank. For two ranks it is one exchange, moving exactly the ring's bytes.
// - StreamedPairAllreduce: the same exchange between two ranks for a message that arrives in
//   pieces (the level above the host in a pipelined hierarchical allreduce).
// Every function is called by all ranks with agreeing arguments.
#pragma once

#include <cstddef>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/comm/piece_stream.h"
#include "cadre/comm/types.h"
#include "cadre/transport/device.h"

namespace cadre::comm::tcp_algo {

using transport::Device;

inline constexpr size_t kDefaultSegmentBytes = 1 << 20;
// RingAllreduce's pieces when segment_bytes is 0: a block in at least kRingPieces pieces, each
// of at least kRingMinPieceBytes, at most kDefaultSegmentBytes.
inline constexpr size_t kRingPieces = 4;
inline constexpr size_t kRingMinPieceBytes = 64 << 10;

// `out` holds `in` (copied when they differ) and is reduced in place.
Status RingAllreduce(Device& d, const void* in, void* out, size_t count, DataType dtype,
                     ReduceOp op, size_t segment_bytes, Deadline deadline);
Status HalvingDoublingAllreduce(Device& d, const void* in, void* out, size_t count, DataType dtype,
                                ReduceOp op, Deadline deadline);
// Exchanges move at most `piece_bytes` per step (0: kRecursiveDoublingPieceBytes), which bounds
// the scratch it allocates.
inline constexpr size_t kRecursiveDoublingPieceBytes = 4 << 20;
Status RecursiveDoublingAllreduce(Device& d, const void* in, void* out, size_t count,
                                  DataType dtype, ReduceOp op, size_t piece_bytes,
                                  Deadline deadline);
// The allreduce of a PieceStream between the two ranks of `d`: each piece is one exchange (send
// ours, receive the peer's into the output, reduce there), started as soon as the piece is ready
// without waiting for the earlier pieces to come back, so a link's delay is paid once per
// message rather than once per piece. It keeps kStreamPiecesAhead pieces beyond the last one
// received in flight, waiting for the producer when they are not ready yet, and starts any
// further ones that are. A stream whose producer gives up ends with kAborted.
inline constexpr size_t kStreamPiecesAhead = 2;
Status StreamedPairAllreduce(Device& d, const PieceStream& stream, DataType dtype, ReduceOp op,
                             Deadline deadline);
Status Broadcast(Device& d, void* buffer, size_t bytes, int root, Deadline deadline);
Status Allgatherv(Device& d, const void* in, void* out, const std::vector<size_t>& counts,
                  size_t elem, Deadline deadline);
Status ReduceScatter(Device& d, const void* in, void* out, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op, Deadline deadline);
Status Alltoall(Device& d, const void* in, void* out, const std::vector<size_t>& send_counts,
                const std::vector<size_t>& recv_counts, size_t elem, Deadline deadline);
Status Barrier(Device& d, Deadline deadline);

}  // namespace cadre::comm::tcp_algo
