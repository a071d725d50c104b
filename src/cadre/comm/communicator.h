// Communicator: a group of ranks that can run collectives together — the one group abstraction
// of cadre (as c10d's ProcessGroup): the engine, the benchmarks and the tests all run on it.
//
// Implementations:
// - Create() (communicator_impl.h): the communication core, shared memory and TCP;
// - InProcessGroup (in_process.h): threads of one process as ranks, every collective derived
//   from one byte exchange, no transport; for tests and for a group of one;
// - StoreCommunicator (store_communicator.h): the same exchange through a store::Store, between
//   processes that have nothing but the rendezvous store.
//
// Create() rendezvouses through the store (every rank of the group calls it with the same store
// and size), authenticates each connection with the job token, and learns the topology from the
// ranks' host names: ranks with the same host are "local" and talk over shared memory, others over
// TCP. A Communicator is an object, not global state: one process may hold many (threads as ranks
// in tests). It is not thread-safe: one thread at a time issues collectives on it, and every rank
// must issue the same collectives in the same order.
//
// Failures: when a peer dies, closes, stalls past the timeout, or sends a malformed frame, the
// collective throws cadre::Error naming that peer ("rank 3 (host learner-2)") on every surviving
// rank within the timeout. After such an error the communicator is broken: further calls throw.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/comm/collective_options.h"
#include "cadre/store/store.h"

namespace cadre::comm {

struct Topology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;       // index among the ranks on this host
  int local_size = 1;       // ranks on this host
  int cross_rank = 0;       // index of this host among the hosts (ordered by their lowest rank)
  int cross_size = 1;       // number of hosts
  bool homogeneous = true;  // every host holds the same number of ranks
  std::vector<std::string> hosts;  // host name of each rank
};

// Bytes of each half of a rank's shared-memory slot unless CommunicatorOptions says otherwise:
// large enough that per-step synchronisation is amortised, small enough to stay near the caches.
inline constexpr size_t kDefaultShmSlotBytes = size_t{1} << 20;
// The largest slot half Create() accepts (each rank maps two per rank of its host).
inline constexpr size_t kMaxShmSlotBytes = size_t{1} << 30;

// Everything a communicator is configured with arrives here as values; nothing in comm/ (or
// below) reads the environment. config/from_env.h fills these from a learner's environment.
struct CommunicatorOptions {
  int rank = 0;
  int size = 1;
  std::shared_ptr<store::Store> store;
  // Secret shared by the job's ranks; peers without it are refused at the handshake.
  std::string token;
  // Name of this rank's host; empty means gethostname(). Ranks with equal host names share memory.
  std::string host;
  // Address to listen on for TCP peers, and to advertise to them. When every rank is on one host
  // it is always 127.0.0.1; otherwise empty means `host` (the address it resolves to, which
  // must be this machine's), and "0.0.0.0" listens on every interface and advertises `host`.
  std::string bind_address;
  // How long any one collective (and the rendezvous) may wait on a peer.
  Duration timeout = std::chrono::seconds(60);
  // Use shared memory between ranks on one host (TCP otherwise). Every rank must pass the same.
  bool use_shm = true;
  // When the ranks span hosts: carry the point-to-point messages of the flat algorithms (and of
  // every collective other than the hierarchical allreduce) between ranks of one host over
  // shared memory (a ring per pair, transport/mixed/device.h) instead of TCP loopback. Needs
  // use_shm; the ranks of one host must share a network namespace. Off by default: the
  // hierarchical allreduce, which kAuto picks where it can, keeps shared memory inside the host
  // either way. Every rank must pass the same.
  bool shm_pairs = false;
  // Bytes of each half of a rank's shared-memory slot (the largest piece one step moves); 0 means
  // the default, above kMaxShmSlotBytes is refused. Every rank must use the same.
  size_t shm_slot_bytes = kDefaultShmSlotBytes;
  // The longest busy-wait of a shared-memory wait before it yields (transport::shm::ShmOptions).
  std::chrono::microseconds shm_spin_max{50};
  // A hosts(5) file consulted for host names (this rank's and its peers') before getaddrinfo: the
  // learner contract's CADRE_HOSTS (net/resolver.h); empty: none.
  std::string hosts_file;
  // How AllreduceAlgorithm::kHierarchical runs (host grid, pipelining).
  HierarchyOptions hierarchy;
  // How error messages name each rank (rank_names[r] for rank r, and this rank's own as the
  // context of its errors). Empty: "rank R", with "(host H)" when the ranks are on several hosts.
  // Subgroup() passes the names its ranks have in the group it is made from, so that a failure
  // inside a subgroup (the hierarchical allreduce's levels) names the ranks the caller knows.
  std::vector<std::string> rank_names;
};

class Communicator {
 public:
  // Collective over all `options.size` ranks. Throws cadre::Error on failure.
  static std::unique_ptr<Communicator> Create(CommunicatorOptions options);

  virtual ~Communicator() = default;

  int rank() const { return topology().rank; }
  int size() const { return topology().size; }
  virtual const Topology& topology() const = 0;
  virtual Duration timeout() const = 0;

  // A communicator over a subset of this one's ranks, listed in the same order by every member
  // (non-members do not call). `name` keeps the subgroup's rendezvous keys apart from others'.
  virtual std::unique_ptr<Communicator> Subgroup(const std::vector<int>& ranks,
                                                 const std::string& name) = 0;

  // Ranks of this host's group and of the group of ranks with this local_rank on every host —
  // the building blocks of hierarchical algorithms. Created on first use, collectively.
  virtual Communicator& Local() = 0;
  virtual Communicator& Cross() = 0;

  // ---- The implementation side, called by the free functions of collectives.h only ----
  // Those check the arguments first (types, ops, counts per rank, buffers set, no overlap) and
  // handle the cases that need no peer (a count of zero, a group of one), so an implementation
  // sees valid calls that move data. Each completes or throws cadre::Error naming the faulty
  // rank; after a throw the communicator is broken and CheckUsable() throws kAborted.
  virtual void CheckUsable() const = 0;
  // Whether AllreduceAlgorithm::kHierarchical can run here (ShapeOf).
  virtual bool HierarchicalPossible() const = 0;
  // Whether StreamedAllreduce keeps several pieces in flight (StreamsPieces).
  virtual bool StreamsPieces() const = 0;
  virtual void RunAllreduce(const AllreduceOptions& options) = 0;
  virtual void RunStreamedAllreduce(const StreamedAllreduceOptions& options) = 0;
  virtual void RunBroadcast(const BroadcastOptions& options) = 0;
  virtual void RunAllgather(const AllgatherOptions& options) = 0;
  virtual void RunReduceScatter(const ReduceScatterOptions& options) = 0;
  virtual void RunAlltoall(const AlltoallOptions& options) = 0;
  virtual void RunBarrier(std::optional<Duration> timeout) = 0;

 protected:
  // For Subgroup(): this rank's index in `ranks`, after checking that they are ranks of this
  // communicator, each listed once, this one among them (else kInvalidArgument naming `name`).
  int SubgroupIndex(const std::vector<int>& ranks, const std::string& name) const;
};

}  // namespace cadre::comm
