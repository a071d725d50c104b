#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>
#include <set>

#include "cadre/comm/communicator_impl.h"
#include "cadre/comm/failure_records.h"
#include "cadre/comm/hierarchical_allreduce.h"
#include "cadre/store/prefix_store.h"
#include "cadre/store/store_util.h"
#include "cadre/transport/mixed/device.h"
#include "cadre/transport/tcp/device.h"

namespace cadre::comm {
namespace {

// How long a failing rank waits for the others' failure records (they fail within moments of
// each other once connections close) before it reports what it has.
constexpr auto kFailureRecordWait = std::chrono::seconds(2);
// How long a failing rank gives the store for each of its failure exchanges beyond that wait:
// plenty for a live store, short against a collective timeout.
constexpr auto kFailureStoreLimit = std::chrono::seconds(5);
// Said once (a level of a hierarchy and the communicator above may both meet it).
constexpr const char* kStoreUnknown = "; the other ranks' failures are unknown: ";

std::string ThisHostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

Topology ComputeTopology(int rank, std::vector<std::string> hosts) {
  Topology t;
  t.rank = rank;
  t.size = static_cast<int>(hosts.size());
  std::vector<std::string> order;  // hosts by lowest rank
  std::map<std::string, int> per_host;
  for (const auto& h : hosts) {
    if (per_host[h]++ == 0) order.push_back(h);
  }
  const std::string& mine = hosts[rank];
  t.local_size = per_host[mine];
  t.local_rank = static_cast<int>(std::count(hosts.begin(), hosts.begin() + rank, mine));
  t.cross_size = static_cast<int>(order.size());
  t.cross_rank = static_cast<int>(std::find(order.begin(), order.end(), mine) - order.begin());
  t.homogeneous = std::all_of(per_host.begin(), per_host.end(),
                              [&](const auto& kv) { return kv.second == t.local_size; });
  t.hosts = std::move(hosts);
  return t;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::Create(CommunicatorOptions options) {
  if (options.size < 1) {
    throw Error(Code::kInvalidArgument,
                "communicator size must be >= 1, got " + std::to_string(options.size));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    throw Error(Code::kInvalidArgument, "rank " + std::to_string(options.rank) +
                                            " is outside a communicator of size " +
                                            std::to_string(options.size));
  }
  if (!options.store) throw Error(Code::kInvalidArgument, "communicator options need a store");
  if (!options.rank_names.empty() && options.rank_names.size() != size_t(options.size)) {
    throw Error(Code::kInvalidArgument,
                "communicator options name " + std::to_string(options.rank_names.size()) +
                    " ranks for a group of " + std::to_string(options.size));
  }
  if (options.timeout <= Duration::zero()) {
    throw Error(Code::kInvalidArgument, "communicator timeout must be positive");
  }
  if (options.shm_slot_bytes > kMaxShmSlotBytes) {
    throw Error(Code::kInvalidArgument,
                "shared-memory slot of " + std::to_string(options.shm_slot_bytes) +
                    " bytes exceeds the limit of " + std::to_string(kMaxShmSlotBytes));
  }
  return std::make_unique<CommunicatorImpl>(std::move(options));
}

int Communicator::SubgroupIndex(const std::vector<int>& ranks, const std::string& name) const {
  std::set<int> seen;
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    int r = ranks[i];
    if (r < 0 || r >= size() || !seen.insert(r).second) {
      throw Error(Code::kInvalidArgument, "subgroup '" + name + "': rank " + std::to_string(r) +
                                              " is out of range or listed twice");
    }
    if (r == rank()) index = static_cast<int>(i);
  }
  if (index < 0) {
    throw Error(Code::kInvalidArgument,
                "subgroup '" + name + "' does not contain rank " + std::to_string(rank()));
  }
  return index;
}

CommunicatorImpl::CommunicatorImpl(CommunicatorOptions options) : options_(std::move(options)) {
  if (options_.host.empty()) options_.host = ThisHostName();
  Rendezvous();
}

CommunicatorImpl::~CommunicatorImpl() = default;

void CommunicatorImpl::Rendezvous() {
  const int rank = options_.rank;
  const int size = options_.size;
  Deadline deadline(options_.timeout);
  int64_t generation = options_.store->add("cadre-comm/generation/" + std::to_string(rank), 1);
  store_ = std::make_shared<store::PrefixStore>("cadre-comm/" + std::to_string(generation),
                                                options_.store);
  store_->set_timeout(options_.timeout);

  std::vector<std::string> hosts(size);
  try {
    store_->set_string("host/" + std::to_string(rank), options_.host);
  } catch (const Error& e) {
    throw Error(e.code(), "the rendezvous store failed before rank " + std::to_string(rank) +
                              " (this one) joined the communicator: " + e.what());
  }
  for (int r = 0; r < size; ++r) {
    std::string key = "host/" + std::to_string(r);
    try {
      store_->wait({key}, deadline.remaining());
      hosts[r] = store_->get_string(key);
    } catch (const Error& e) {
      const std::string who = "rank " + std::to_string(r);
      throw Error(store::StoreWaitError(e, "rendezvous: " + who + " did not join the communicator",
                                        who + " joined the communicator"));
    }
  }
  topology_ = ComputeTopology(rank, std::move(hosts));
  names_ = options_.rank_names;
  for (int r = 0; r < size && options_.rank_names.empty(); ++r) {
    names_.push_back(topology_.cross_size > 1
                         ? "rank " + std::to_string(r) + " (host " + topology_.hosts[r] + ")"
                         : "rank " + std::to_string(r));
  }
  if (size == 1) return;

  if (options_.use_shm && topology_.cross_size == 1) {
    transport::shm::ShmOptions shm;
    shm.slot_bytes = options_.shm_slot_bytes == 0 ? kDefaultShmSlotBytes : options_.shm_slot_bytes;
    shm.spin_max = options_.shm_spin_max;
    store::PrefixStore shm_store("shm", store_);
    ThrowIfError(
        transport::shm::ShmGroup::Create(shm_store, rank, size, names_, shm, deadline, &shm_));
    return;
  }
  transport::tcp::ConnectOptions co;
  co.rank = rank;
  co.size = size;
  co.token = options_.token;
  co.names = names_;
  co.hosts_file = options_.hosts_file;
  if (topology_.cross_size == 1) {
    co.bind_address = co.advertise_address = "127.0.0.1";
  } else {
    // Listen on this rank's own address, the one its peers are told to dial; every interface
    // only when the caller asks for it ("0.0.0.0").
    co.bind_address = options_.bind_address.empty() ? options_.host : options_.bind_address;
    co.advertise_address = options_.bind_address.empty() || options_.bind_address == "0.0.0.0"
                               ? options_.host
                               : options_.bind_address;
  }
  if (options_.use_shm && options_.shm_pairs && topology_.local_size > 1) {
    transport::mixed::ConnectOptions mo;
    mo.tcp = co;
    for (int r = 0; r < size; ++r) {
      if (topology_.hosts[r] == options_.host) mo.local_ranks.push_back(r);
    }
    std::unique_ptr<transport::mixed::MixedDevice> dev;
    ThrowIfError(transport::mixed::MixedDevice::Connect(*store_, mo, deadline, &dev));
    tcp_ = std::move(dev);
    return;
  }
  std::unique_ptr<transport::tcp::TcpDevice> dev;
  ThrowIfError(transport::tcp::TcpDevice::Connect(*store_, co, deadline, &dev));
  tcp_ = std::move(dev);
}

void CommunicatorImpl::CheckUsable() const {
  if (!broken_.ok()) {
    throw Error(Code::kAborted,
                "communicator is broken by an earlier error: " + broken_.ToString());
  }
}

void CommunicatorImpl::Fail(const Status& status, bool in_subgroup) {
  // A subgroup's failure already names this rank. It is shared again here: ranks that failed in
  // other subgroups (another host's) meet only in this communicator's records.
  Status s = in_subgroup ? status
                         : status.WithContext(options_.rank_names.empty()
                                                  ? "rank " + std::to_string(topology_.rank)
                                                  : names_[topology_.rank]);
  // Explained: the failure names its cause from the peers' own word or a connection that ended
  // without one (a process that exited), or the shared-memory group's (a pid that exited, an
  // abort whose reason was explained). A level of the hierarchical allreduce that fails because
  // another one did (a streamed allreduce whose producer stopped carries the producer's error)
  // is explained when that one was: the family's flag.
  const bool explained = (tcp_ && tcp_->failure_explained()) ||
                         (shm_ && (status.code() == Code::kIo || shm_->abort_explained())) ||
                         family_->explained.load();
  if (explained) family_->explained = true;
  // The peers first, with the reason (TCP notices): they fail at once knowing why, whatever the
  // store does next.
  int culprit = -1;  // for the shared-memory group: the peer the message starts with ("rank 3 ...")
  for (int r = 0; r < topology_.size; ++r) {
    const std::string& m = status.message();
    const std::string& n = names_[r];
    bool named = m.rfind(n, 0) == 0 && (m.size() == n.size() || !std::isdigit(m[n.size()]));
    if (r != topology_.rank && named) culprit = r;
  }
  ShutdownTransports(s, explained, culprit);
  if (in_subgroup && hierarchy_) {
    // Peers waiting in another level learn it too, instead of at this process's exit.
    for (Communicator* level : hierarchy_->communicators()) {
      if (auto* impl = dynamic_cast<CommunicatorImpl*>(level)) {
        impl->ShutdownTransports(s, explained, -1);
      }
    }
  }
  // What the store adds is best effort, each exchange bounded (comm/failure_records.h): a store
  // that died or stopped must not hold this rank for the store's own timeout. A failure already
  // explained needs nothing back from it: its records (what this rank called, for the ranks that
  // timed out) are written in the background.
  const FailureContext context{store_, topology_.rank, names_, collective_,
                               hierarchy_ ? 2 * kFailureRecordWait : kFailureRecordWait};
  std::optional<SharedFailure> shared;
  if (tcp_ && status.code() != Code::kInvalidArgument) {
    // A mismatch or a timeout still wants the store: what each rank called, who did not fail.
    const bool needs_store = s.code() == Code::kMismatch || s.code() == Code::kTimeout;
    const bool wait = (needs_store || !explained) && !family_->store_silent.load();
    std::string store_problem;
    shared = ShareFailure(context, s, explained, wait ? kFailureStoreLimit : Duration::zero(),
                          &store_problem);
    if (shared) {
      s = shared->status;
    } else if (wait && s.message().find(kStoreUnknown) == std::string::npos) {
      if (store_problem.empty()) family_->store_silent = true;  // not answering: do not wait again
      s = Status(s.code(),
                 s.message() + kStoreUnknown +
                     (store_problem.empty()
                          ? "the rendezvous store did not answer within " +
                                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                   kFailureStoreLimit)
                                                   .count()) +
                                " s (its process is stopped or the machine overloaded)"
                          : "the rendezvous store failed: " + store_problem));
    }
  }
  if (shared && s.code() == Code::kMismatch) {
    s = WithWhatEachRankCalled(context, s, kFailureStoreLimit);
  } else if (shared && (shared->first == Code::kTimeout || s.code() == Code::kTimeout)) {
    s = WithRanksThatDidNotFail(context, s, kFailureStoreLimit);
  }
  if (broken_.ok()) broken_ = s;
  throw Error(s);
}

void CommunicatorImpl::ShutdownTransports(const Status& why, bool explained, int culprit) {
  if (tcp_) tcp_->Shutdown(why, explained);
  if (shm_) shm_->Abort(culprit, why.code(), why.message(), explained);
}

std::unique_ptr<Communicator> CommunicatorImpl::Subgroup(const std::vector<int>& ranks,
                                                         const std::string& name) {
  CheckUsable();
  const int index = SubgroupIndex(ranks, name);
  CommunicatorOptions o = options_;
  o.rank = index;
  o.size = static_cast<int>(ranks.size());
  o.store = std::make_shared<store::PrefixStore>("group/" + name, store_);
  o.rank_names.clear();
  for (int r : ranks) o.rank_names.push_back(names_[r]);
  auto sub = Communicator::Create(std::move(o));
  static_cast<CommunicatorImpl&>(*sub).family_ = family_;  // Create makes a CommunicatorImpl
  return sub;
}

Communicator& CommunicatorImpl::Local() {
  if (!local_) {
    std::vector<int> ranks;
    for (int r = 0; r < topology_.size; ++r) {
      if (topology_.hosts[r] == topology_.hosts[topology_.rank]) ranks.push_back(r);
    }
    local_ = Subgroup(ranks, "local-" + std::to_string(topology_.cross_rank));
  }
  return *local_;
}

Communicator& CommunicatorImpl::Cross() {
  if (!cross_) {
    std::vector<int> ranks;
    std::map<std::string, int> seen;  // ranks met so far per host
    for (int r = 0; r < topology_.size; ++r) {
      if (seen[topology_.hosts[r]]++ == topology_.local_rank) ranks.push_back(r);
    }
    cross_ = Subgroup(ranks, "cross-" + std::to_string(topology_.local_rank));
  }
  return *cross_;
}

}  // namespace cadre::comm
