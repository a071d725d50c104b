#include "cadre/comm/exchange_communicator.h"

#include <cstring>
#include <numeric>
#include <string>

#include "cadre/comm/collectives.h"
#include "cadre/comm/in_process.h"
#include "cadre/comm/reduce.h"

namespace cadre::comm {

namespace {

using Bytes = ExchangeCommunicator::Bytes;

Bytes Copy(const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return n == 0 ? Bytes() : Bytes(b, b + n);
}

void CheckSize(const std::vector<Bytes>& all, int rank, size_t expected, const char* what) {
  if (all[rank].size() != expected) {
    throw Error(MismatchError(std::string(what) + ": rank " + std::to_string(rank) + " sent " +
                              std::to_string(all[rank].size()) + " bytes, expected " +
                              std::to_string(expected)));
  }
}

void PutCount(uint64_t c, Bytes& out) {
  uint8_t b[8];
  std::memcpy(b, &c, 8);
  out.insert(out.end(), b, b + 8);
}

}  // namespace

ExchangeCommunicator::ExchangeCommunicator(int rank, int size, Duration timeout,
                                           const std::string& host)
    : timeout_(timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(InvalidArgument("communicator: rank " + std::to_string(rank) +
                                " out of range for size " + std::to_string(size)));
  }
  topology_.rank = rank;
  topology_.size = size;
  topology_.local_rank = rank;
  topology_.local_size = size;
  topology_.hosts.assign(static_cast<size_t>(size), host);
}

ExchangeCommunicator::~ExchangeCommunicator() = default;

Communicator& ExchangeCommunicator::Cross() {
  if (!cross_) cross_ = InProcessGroup::Create(1, timeout_)->Member(0);
  return *cross_;
}

void ExchangeCommunicator::CheckUsable() const {
  if (!broken_.ok()) {
    throw Error(Code::kAborted,
                "communicator is broken by an earlier error: " + broken_.ToString());
  }
}

void ExchangeCommunicator::Fail(const Status& s) {
  if (broken_.ok()) broken_ = s;
  throw Error(s);
}

std::vector<Bytes> ExchangeCommunicator::Exchange(Bytes mine) {
  try {
    return ExchangeBytes(std::move(mine));
  } catch (const Error& e) {
    Fail(e.status());
  }
}

void ExchangeCommunicator::RunAllreduce(const AllreduceOptions& o) {
  const size_t bytes = o.count * ElementSize(o.dtype);
  auto all = Exchange(Copy(o.input, bytes));
  for (int r = 0; r < size(); ++r) {
    if (all[r].size() != bytes) {
      Fail(MismatchError("allreduce: rank " + std::to_string(r) + " sent " +
                         std::to_string(all[r].size()) + " bytes, expected " +
                         std::to_string(bytes)));
    }
  }
  // Reduce in rank order on every rank so that all ranks get bit-identical results.
  std::memcpy(o.output, all[0].data(), bytes);
  for (int r = 1; r < size(); ++r) {
    Reduce(o.output, o.output, all[r].data(), o.count, o.dtype, o.op);
  }
}

void ExchangeCommunicator::RunStreamedAllreduce(const StreamedAllreduceOptions& o) {
  const Status st =
      AllreducePiecesInTurn(o.stream, ElementSize(o.dtype), [&](void* buffer, size_t count) {
        AllreduceOptions a;
        a.input = a.output = buffer;
        a.count = count;
        a.dtype = o.dtype;
        a.op = o.op;
        Allreduce(*this, a);
      });
  if (!st.ok()) Fail(st);
}

void ExchangeCommunicator::RunBroadcast(const BroadcastOptions& o) {
  const size_t bytes = o.count * ElementSize(o.dtype);
  auto all = Exchange(rank() == o.root ? Copy(o.buffer, bytes) : Bytes());
  try {
    CheckSize(all, o.root, bytes, "broadcast");
  } catch (const Error& e) {
    Fail(e.status());
  }
  if (rank() != o.root) std::memcpy(o.buffer, all[o.root].data(), bytes);
}

void ExchangeCommunicator::RunAllgather(const AllgatherOptions& o) {
  const size_t es = ElementSize(o.dtype);
  auto all = Exchange(Copy(o.input, o.counts[rank()] * es));
  uint8_t* out = static_cast<uint8_t*>(o.output);
  for (int r = 0; r < size(); ++r) {
    try {
      CheckSize(all, r, o.counts[r] * es, "allgather");
    } catch (const Error& e) {
      Fail(e.status());
    }
    if (!all[r].empty()) std::memmove(out, all[r].data(), all[r].size());
    out += o.counts[r] * es;
  }
}

void ExchangeCommunicator::RunReduceScatter(const ReduceScatterOptions& o) {
  const size_t es = ElementSize(o.dtype);
  const size_t total = std::accumulate(o.counts.begin(), o.counts.end(), size_t{0});
  auto all = Exchange(Copy(o.input, total * es));
  size_t offset = 0;
  for (int j = 0; j < rank(); ++j) offset += o.counts[j];
  const size_t mine = o.counts[rank()];
  for (int r = 0; r < size(); ++r) {
    try {
      CheckSize(all, r, total * es, "reducescatter");
    } catch (const Error& e) {
      Fail(e.status());
    }
  }
  if (mine == 0) return;
  std::memcpy(o.output, all[0].data() + offset * es, mine * es);
  for (int r = 1; r < size(); ++r) {
    Reduce(o.output, o.output, all[r].data() + offset * es, mine, o.dtype, o.op);
  }
}

void ExchangeCommunicator::RunAlltoall(const AlltoallOptions& o) {
  const size_t es = ElementSize(o.dtype);
  const size_t total = std::accumulate(o.send_counts.begin(), o.send_counts.end(), size_t{0});
  // Every rank sends its whole input; receivers pick their block (fine for a test group).
  Bytes mine;
  for (size_t c : o.send_counts) PutCount(c, mine);
  const uint8_t* in = static_cast<const uint8_t*>(o.input);
  if (total > 0) mine.insert(mine.end(), in, in + total * es);
  auto all = Exchange(std::move(mine));
  uint8_t* out = static_cast<uint8_t*>(o.output);
  const size_t header = 8 * static_cast<size_t>(size());
  for (int r = 0; r < size(); ++r) {
    const Bytes& b = all[r];
    if (b.size() < header) {
      Fail(MismatchError("alltoall: rank " + std::to_string(r) + " sent " +
                         std::to_string(b.size()) + " bytes, expected at least " +
                         std::to_string(header)));
    }
    size_t offset = 0;
    size_t mine_count = 0;
    for (int j = 0; j < size(); ++j) {
      uint64_t c;
      std::memcpy(&c, b.data() + 8 * j, 8);
      if (j < rank()) offset += c;
      if (j == rank()) mine_count = c;
    }
    if (mine_count != o.recv_counts[r] || header + (offset + mine_count) * es > b.size()) {
      Fail(MismatchError("alltoall: rank " + std::to_string(r) + " sends " +
                         std::to_string(mine_count) + " elements to rank " +
                         std::to_string(rank()) + ", which expects " +
                         std::to_string(o.recv_counts[r])));
    }
    if (mine_count) std::memcpy(out, b.data() + header + offset * es, mine_count * es);
    out += mine_count * es;
  }
}

void ExchangeCommunicator::RunBarrier(std::optional<Duration>) { Exchange(Bytes()); }

}  // namespace cadre::comm
