#include "cadre/comm/tcp_collectives.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "cadre/comm/reduce.h"

namespace cadre::comm::tcp_algo {
namespace {

using transport::Transfer;

struct Block {
  size_t offset = 0;  // bytes
  size_t bytes = 0;
};

std::vector<Block> Blocks(const std::vector<size_t>& counts, size_t elem) {
  std::vector<Block> b(counts.size());
  size_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    b[i] = {off, counts[i] * elem};
    off += b[i].bytes;
  }
  return b;
}

// `count` elements split into n nearly equal blocks.
std::vector<size_t> EvenCounts(size_t count, int n) {
  std::vector<size_t> c(n, count / n);
  for (size_t i = 0; i < count % n; ++i) ++c[i];
  return c;
}

int Mod(int a, int n) { return ((a % n) + n) % n; }

// Block `rank` of `buf` is complete on entry; on return every block is.
Status RingAllgatherInPlace(Device& d, uint8_t* buf, const std::vector<Block>& blocks,
                            Deadline deadline) {
  const int n = d.size(), r = d.rank();
  for (int s = 0; s < n - 1; ++s) {
    const Block& out = blocks[Mod(r - s, n)];
    const Block& in = blocks[Mod(r - s - 1, n)];
    Transfer t[2] = {Transfer::Send(Mod(r + 1, n), buf + out.offset, out.bytes),
                     Transfer::Recv(Mod(r - 1, n), buf + in.offset, in.bytes)};
    CADRE_RETURN_IF_ERROR(d.Run(t, deadline));
  }
  return Status::Ok();
}

}  // namespace

// The ring allreduce (reduce-scatter, then allgather, around the ring), pipelined across its
// steps: every block is cut into pieces, and a piece moves on to its next step as soon as it
// has arrived (and, while reducing, been added in), while later pieces of the earlier step are
// still on the wire. The whole allreduce is one RunStreaming, so a link with latency stays busy
// instead of idling for a round of the ring at every step, as a ring run step by step does.
//
// Piece i of stage t (t < n-1: reduce-scatter step t; then allgather step t-(n-1)) is receive
// number t * pieces + i: the first `pieces` receives are posted up front, and the completion of
// each posts the same piece's receive of the next stage, so every rank queues its receives in
// the order its left neighbour sends them. A piece's reduce-scatter partial lands in its own
// slot of `tmp`, free again once added in.
Status RingAllreduce(Device& d, const void* in, void* out, size_t count, DataType dtype,
                     ReduceOp op, size_t segment_bytes, Deadline deadline) {
  const int n = d.size(), r = d.rank();
  const size_t elem = ElementSize(dtype);
  auto* buf = static_cast<uint8_t*>(out);
  if (in != out) std::memcpy(buf, in, count * elem);
  if (n == 1) return Status::Ok();
  const auto blocks = Blocks(EvenCounts(count, n), elem);
  size_t largest = 0;
  for (const Block& b : blocks) largest = std::max(largest, b.bytes);
  if (segment_bytes == 0) {
    // At least kRingPieces pieces per block keep the pipeline full; pieces of at least
    // kRingMinPieceBytes keep the per-message cost small; at most kDefaultSegmentBytes.
    segment_bytes =
        std::min(kDefaultSegmentBytes, std::max(kRingMinPieceBytes, largest / kRingPieces));
  }
  const size_t seg = std::max(elem, segment_bytes / elem * elem);
  // Every rank cuts every block into the same number of pieces (from the largest block), so the
  // sender's piece i is the receiver's piece i; pieces past a block's end are empty messages.
  const size_t pieces = std::max<size_t>(1, (largest + seg - 1) / seg);
  const int right = Mod(r + 1, n), left = Mod(r - 1, n);
  const size_t steps = static_cast<size_t>(n - 1);
  auto piece = [&](int block, size_t i) {
    const Block& b = blocks[static_cast<size_t>(Mod(block, n))];
    const size_t off = std::min(b.bytes, i * seg);
    return std::pair<uint8_t*, size_t>(buf + b.offset + off, std::min(seg, b.bytes - off));
  };
  std::vector<uint8_t> tmp(pieces * seg);
  auto partial = [&](size_t i) { return tmp.data() + i * seg; };

  std::vector<Transfer> initial;
  for (size_t i = 0; i < pieces; ++i) {
    auto [data, len] = piece(r - 1, i);
    initial.push_back(Transfer::Send(right, data, len));
  }
  for (size_t i = 0; i < pieces; ++i) {
    initial.push_back(Transfer::Recv(left, partial(i), piece(r - 2, i).second));
  }
  auto on_received = [&](size_t number, std::vector<Transfer>* more) {
    const size_t stage = number / pieces, i = number % pieces;
    const int s = static_cast<int>(stage);
    if (stage < steps) {  // reduce-scatter step s: the partial of block r-s-2 arrived
      auto [acc, len] = piece(r - s - 2, i);
      Reduce(acc, acc, partial(i), len / elem, dtype, op);
      // Forward the sum: a partial for the next step, or at the last step block
      // r - (n - 1) - 1 = r, complete, which starts the allgather (received straight into buf).
      more->push_back(Transfer::Send(right, acc, len));
      if (stage + 1 < steps) {
        more->push_back(Transfer::Recv(left, partial(i), piece(r - s - 3, i).second));
      } else {
        auto [next, next_len] = piece(r - 1, i);
        more->push_back(Transfer::Recv(left, next, next_len));
      }
      return Status::Ok();
    }
    const int a = static_cast<int>(stage - steps);  // allgather step a: block r-a-1 arrived
    if (stage + 1 < 2 * steps) {
      auto [data, len] = piece(r - a - 1, i);
      more->push_back(Transfer::Send(right, data, len));
      auto [next, next_len] = piece(r - a - 2, i);
      more->push_back(Transfer::Recv(left, next, next_len));
    }
    return Status::Ok();
  };
  return d.RunStreaming(initial, deadline, on_received);
}

Status HalvingDoublingAllreduce(Device& d, const void* in, void* out, size_t count, DataType dtype,
                                ReduceOp op, Deadline deadline) {
  const int n = d.size(), r = d.rank();
  const size_t elem = ElementSize(dtype);
  auto* buf = static_cast<uint8_t*>(out);
  if (in != out) std::memcpy(buf, in, count * elem);
  const size_t bytes = count * elem;
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int extra = n - p2;
  if (r >= p2) {  // fold into the partner, get the result back at the end
    Transfer send[1] = {Transfer::Send(r - p2, buf, bytes)};
    CADRE_RETURN_IF_ERROR(d.Run(send, deadline));
    Transfer recv[1] = {Transfer::Recv(r - p2, buf, bytes)};
    return d.Run(recv, deadline);
  }
  std::vector<uint8_t> tmp(bytes);
  if (r < extra) {
    Transfer recv[1] = {Transfer::Recv(r + p2, tmp.data(), bytes)};
    CADRE_RETURN_IF_ERROR(d.Run(recv, deadline));
    Reduce(buf, buf, tmp.data(), count, dtype, op);
  }
  struct Range {
    size_t lo, hi;  // elements
  };
  std::vector<Range> stack;
  Range cur{0, count};
  for (int mask = p2 / 2; mask >= 1; mask /= 2) {
    const int partner = r ^ mask;
    const size_t mid = cur.lo + (cur.hi - cur.lo) / 2;
    Range keep = (r & mask) == 0 ? Range{cur.lo, mid} : Range{mid, cur.hi};
    Range give = (r & mask) == 0 ? Range{mid, cur.hi} : Range{cur.lo, mid};
    Transfer t[2] = {Transfer::Send(partner, buf + give.lo * elem, (give.hi - give.lo) * elem),
                     Transfer::Recv(partner, tmp.data(), (keep.hi - keep.lo) * elem)};
    CADRE_RETURN_IF_ERROR(d.Run(t, deadline));
    Reduce(buf + keep.lo * elem, buf + keep.lo * elem, tmp.data(), keep.hi - keep.lo, dtype, op);
    stack.push_back(cur);
    cur = keep;
  }
  for (int mask = 1; mask < p2; mask *= 2) {
    const int partner = r ^ mask;
    Range parent = stack.back();
    stack.pop_back();
    Range other = cur.lo == parent.lo ? Range{cur.hi, parent.hi} : Range{parent.lo, cur.lo};
    Transfer t[2] = {Transfer::Send(partner, buf + cur.lo * elem, (cur.hi - cur.lo) * elem),
                     Transfer::Recv(partner, buf + other.lo * elem, (other.hi - other.lo) * elem)};
    CADRE_RETURN_IF_ERROR(d.Run(t, deadline));
    cur = parent;
  }
  if (r < extra) {
    Transfer send[1] = {Transfer::Send(r + p2, buf, bytes)};
    CADRE_RETURN_IF_ERROR(d.Run(send, deadline));
  }
  return Status::Ok();
}

Status RecursiveDoublingAllreduce(Device& d, const void* in, void* out, size_t count,
                                  DataType dtype, ReduceOp op, size_t piece_bytes,
                                  Deadline deadline) {
  const int n = d.size(), r = d.rank();
  const size_t elem = ElementSize(dtype);
  auto* buf = static_cast<uint8_t*>(out);
  if (in != out) std::memcpy(buf, in, count * elem);
  const size_t bytes = count * elem;
  if (piece_bytes == 0) piece_bytes = kRecursiveDoublingPieceBytes;
  const size_t piece = std::max(elem, std::min(bytes, piece_bytes) / elem * elem);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int extra = n - p2;
  if (r >= p2) {  // fold into the partner (in its pieces), get the result back at the end
    for (size_t off = 0; off < bytes; off += piece) {
      Transfer send[1] = {Transfer::Send(r - p2, buf + off, std::min(piece, bytes - off))};
      CADRE_RETURN_IF_ERROR(d.Run(send, deadline));
    }
    Transfer recv[1] = {Transfer::Recv(r - p2, buf, bytes)};
    return d.Run(recv, deadline);
  }
  std::vector<uint8_t> tmp(piece);
  // Every exchange, piece by piece: send ours, receive the peer's, reduce it into ours. Both
  // partners compute a (op) b with the operands swapped, which the (commutative) ops make equal
  // bit for bit, so every rank ends with the same result.
  auto reduce_from = [&](int peer, bool send) -> Status {
    for (size_t off = 0; off < bytes; off += piece) {
      const size_t len = std::min(piece, bytes - off);
      Transfer t[2] = {Transfer::Recv(peer, tmp.data(), len), Transfer::Send(peer, buf + off, len)};
      CADRE_RETURN_IF_ERROR(d.Run(std::span<const Transfer>(t, send ? 2 : 1), deadline));
      Reduce(buf + off, buf + off, tmp.data(), len / elem, dtype, op);
    }
    return Status::Ok();
  };
  if (r < extra) CADRE_RETURN_IF_ERROR(reduce_from(r + p2, /*send=*/false));
  for (int mask = 1; mask < p2; mask *= 2) {
    CADRE_RETURN_IF_ERROR(reduce_from(r ^ mask, /*send=*/true));
  }
  if (r < extra) {
    Transfer send[1] = {Transfer::Send(r + p2, buf, bytes)};
    CADRE_RETURN_IF_ERROR(d.Run(send, deadline));
  }
  return Status::Ok();
}

// Both ranks compute mine (op) theirs, the operands swapped, which the (commutative) ops make
// equal bit for bit. The send reads the input and the reduction writes the output, so a piece
// may be reduced while its own send is still on its way.
Status StreamedPairAllreduce(Device& d, const PieceStream& s, DataType dtype, ReduceOp op,
                             Deadline deadline) {
  const int peer = 1 - d.rank();
  const size_t elem = ElementSize(dtype), pieces = s.size();
  size_t started = 0;
  // Starts every piece that is ready, waiting for those below `need`.
  auto start = [&](size_t need, std::vector<Transfer>* t) -> Status {
    for (; started < pieces; ++started) {
      const bool wait = started < need;
      if (!s.ready(started, wait)) {
        if (!wait) break;
        return StreamStopped(s, started);
      }
      const size_t bytes = s.counts[started] * elem;
      t->push_back(Transfer::Send(peer, s.inputs[started], bytes));
      t->push_back(Transfer::Recv(peer, s.outputs[started], bytes));
    }
    return Status::Ok();
  };
  if (pieces == 0) return Status::Ok();
  std::vector<Transfer> initial;
  CADRE_RETURN_IF_ERROR(start(std::min(pieces, kStreamPiecesAhead), &initial));
  // One receive per piece, queued in piece order: receive k is piece k.
  auto on_received = [&](size_t k, std::vector<Transfer>* more) {
    Reduce(s.outputs[k], s.inputs[k], s.outputs[k], s.counts[k], dtype, op);
    s.done(k);
    return start(std::min(pieces, k + 1 + kStreamPiecesAhead), more);
  };
  return d.RunStreaming(initial, deadline, on_received);
}

Status Broadcast(Device& d, void* buffer, size_t bytes, int root, Deadline deadline) {
  std::vector<Transfer> t;
  if (d.rank() == root) {
    for (int p = 0; p < d.size(); ++p) {
      if (p != root) t.push_back(Transfer::Send(p, buffer, bytes));
    }
  } else {
    t.push_back(Transfer::Recv(root, buffer, bytes));
  }
  return d.Run(t, deadline);
}

Status Allgatherv(Device& d, const void* in, void* out, const std::vector<size_t>& counts,
                  size_t elem, Deadline deadline) {
  auto blocks = Blocks(counts, elem);
  auto* buf = static_cast<uint8_t*>(out);
  const Block& mine = blocks[d.rank()];
  if (in != buf + mine.offset) std::memmove(buf + mine.offset, in, mine.bytes);
  return RingAllgatherInPlace(d, buf, blocks, deadline);
}

// The reduce-scatter half of the ring, step by step and out of place: at step s this rank sends
// its partial sum of block r-s-1 (its input at step 0) and adds its input of block r-s-2 to the
// partial it receives. The partial lives in `acc` (one block), so the input is never copied
// whole; the last step's sum is block r itself, written straight to `out`. Same operand order
// as RingAllreduce.
Status ReduceScatter(Device& d, const void* in, void* out, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op, Deadline deadline) {
  const int n = d.size(), r = d.rank();
  const size_t elem = ElementSize(dtype);
  const auto blocks = Blocks(counts, elem);
  const auto* src = static_cast<const uint8_t*>(in);
  const size_t seg = std::max(elem, kDefaultSegmentBytes / elem * elem);
  size_t largest = 0;
  for (const Block& b : blocks) largest = std::max(largest, b.bytes);
  std::vector<uint8_t> acc(n > 2 ? largest : 0), tmp(std::min(seg, largest));
  const size_t pieces = std::max<size_t>(1, (largest + seg - 1) / seg);
  for (int s = 0; s < n - 1; ++s) {
    const Block& sb = blocks[Mod(r - s - 1, n)];
    const Block& rb = blocks[Mod(r - s - 2, n)];
    const uint8_t* send = s == 0 ? src + sb.offset : acc.data();
    uint8_t* sum = s == n - 2 ? static_cast<uint8_t*>(out) : acc.data();
    for (size_t i = 0; i < pieces; ++i) {
      // Piece i of the partial being sent is gone once Run returns, and the sum written here
      // covers piece i only, so it never overwrites a piece still to be sent from `acc`.
      const size_t so = std::min(sb.bytes, i * seg), sl = std::min(seg, sb.bytes - so);
      const size_t ro = std::min(rb.bytes, i * seg), rl = std::min(seg, rb.bytes - ro);
      Transfer t[2] = {Transfer::Send(Mod(r + 1, n), send + so, sl),
                       Transfer::Recv(Mod(r - 1, n), tmp.data(), rl)};
      CADRE_RETURN_IF_ERROR(d.Run(t, deadline));
      Reduce(sum + ro, src + rb.offset + ro, tmp.data(), rl / elem, dtype, op);
    }
  }
  return Status::Ok();
}

Status Alltoall(Device& d, const void* in, void* out, const std::vector<size_t>& send_counts,
                const std::vector<size_t>& recv_counts, size_t elem, Deadline deadline) {
  auto sb = Blocks(send_counts, elem);
  auto rb = Blocks(recv_counts, elem);
  auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const int me = d.rank();
  std::memcpy(dst + rb[me].offset, src + sb[me].offset, sb[me].bytes);
  std::vector<Transfer> t;
  for (int i = 1; i < d.size(); ++i) {
    int to = Mod(me + i, d.size()), from = Mod(me - i, d.size());
    t.push_back(Transfer::Send(to, src + sb[to].offset, sb[to].bytes));
    t.push_back(Transfer::Recv(from, dst + rb[from].offset, rb[from].bytes));
  }
  return d.Run(t, deadline);
}

Status Barrier(Device& d, Deadline deadline) {
  const int n = d.size(), r = d.rank();
  uint8_t out = 0, in = 0;
  for (int k = 1; k < n; k <<= 1) {
    Transfer t[2] = {Transfer::Send(Mod(r + k, n), &out, 1), Transfer::Recv(Mod(r - k, n), &in, 1)};
    CADRE_RETURN_IF_ERROR(d.Run(t, deadline));
  }
  return Status::Ok();
}

}  // namespace cadre::comm::tcp_algo
