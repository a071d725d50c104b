// Crash semantics with real processes (Gloo keeps forking for exactly this): SIGKILL one rank in
// the middle of allreduces it is taking part in; every survivor must throw an error saying that
// rank died, well before the collective timeout would have ended the wait.
// With shm_pairs, the victim's same-host peer sees it die through shared memory.
// Also: a rank with the wrong job token is refused, and topology/subgroups over pretend hosts.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cadre/comm/collectives.h"
#include "cadre/comm/comm_test_util.h"
#include "cadre/net/socket.h"
#include "cadre/store/hash_store.h"
#include "cadre/store/tcp_store.h"

namespace cadre::comm {
namespace {

constexpr int kVictim = 2;
// Long, so that a survivor that only notices the death by timing out cannot pass: death must be
// detected from the peer's side (a closed connection, an exited pid) well within it.
constexpr auto kTimeout = std::chrono::seconds(60);
constexpr auto kDetectWithin = kTimeout / 2;
// A stopped rank is only noticed by timing out: short, so the test is.
constexpr auto kStallTimeout = std::chrono::seconds(3);

// What happens to the victim in the middle of the allreduces: SIGKILL (it dies) or SIGSTOP (it
// stalls: alive, connections open, answering no one).
// kKillWithoutStore: SIGKILL after the rendezvous store has gone (its process died): the
// survivors cannot share the first failure, but must still fail at once.
// kKillWithStoreStopped: SIGKILL while the store's process is stopped (SIGSTOP: it answers
// nobody, closes nothing): the survivors must not wait out the store's timeout before failing.
enum class Fault { kKill, kStop, kKillWithoutStore, kKillWithStoreStopped };

// How the ranks talk: one host over shared memory, one host over TCP loopback, or two pretend
// hosts of two ranks each with shm_pairs (shared-memory pairs inside a host, TCP between; the
// victim's same-host peer learns of its death from its pidfd), or without them (kHosts: the
// hierarchical allreduce's levels, a shared-memory group inside each host and TCP across).
enum class Route { kShm, kTcp, kShmPairs, kHosts };

// How the survivors name the victim.
std::string VictimName(Route route) {
  return "rank " + std::to_string(kVictim) +
         (route == Route::kShm || route == Route::kTcp ? "" : " (host host-1)");
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The collective the ranks loop on when the fault strikes. Over TCP each allreduce algorithm is
// forced; over shared memory the group has one algorithm, taken with a small (one step) and a
// large (chunked) message.
enum class Op {
  kAllreduceRing,
  kAllreduceHalvingDoubling,
  kAllreduceRecursiveDoubling,
  kAllreduceHierarchical,  // over Route::kHosts only
  kAllreduceSmall,
  kBroadcast,
  kAllgather,
  kBarrier,
};

std::string OpName(Op op) {
  switch (op) {
    case Op::kAllreduceRing:
      return "AllreduceRing";
    case Op::kAllreduceHalvingDoubling:
      return "AllreduceHalvingDoubling";
    case Op::kAllreduceRecursiveDoubling:
      return "AllreduceRecursiveDoubling";
    case Op::kAllreduceHierarchical:
      return "AllreduceHierarchical";
    case Op::kAllreduceSmall:
      return "AllreduceSmall";
    case Op::kBroadcast:
      return "Broadcast";
    case Op::kAllgather:
      return "Allgather";
    case Op::kBarrier:
      return "Barrier";
  }
  return "?";
}

// One call of `op` on `comm` over `buf` (every rank's contribution to allgather is a quarter).
void RunOp(Communicator& comm, Op op, std::vector<float>& buf) {
  switch (op) {
    case Op::kAllreduceRing:
    case Op::kAllreduceHalvingDoubling:
    case Op::kAllreduceRecursiveDoubling:
    case Op::kAllreduceHierarchical:
    case Op::kAllreduceSmall: {
      AllreduceOptions ar;
      ar.input = ar.output = buf.data();
      ar.count = op == Op::kAllreduceSmall ? 7 : buf.size();
      ar.algorithm = op == Op::kAllreduceRing              ? AllreduceAlgorithm::kRing
                     : op == Op::kAllreduceHalvingDoubling ? AllreduceAlgorithm::kHalvingDoubling
                     : op == Op::kAllreduceRecursiveDoubling
                         ? AllreduceAlgorithm::kRecursiveDoubling
                     : op == Op::kAllreduceHierarchical ? AllreduceAlgorithm::kHierarchical
                                                        : AllreduceAlgorithm::kAuto;
      Allreduce(comm, ar);
      return;
    }
    case Op::kBroadcast: {
      BroadcastOptions b;
      b.buffer = buf.data();
      b.count = buf.size();
      Broadcast(comm, b);
      return;
    }
    case Op::kAllgather: {
      AllgatherOptions g;
      const size_t each = buf.size() / static_cast<size_t>(comm.size());
      g.input = buf.data() + each * static_cast<size_t>(comm.rank());
      g.output = buf.data();
      g.counts.assign(static_cast<size_t>(comm.size()), each);
      Allgather(comm, g);
      return;
    }
    case Op::kBarrier:
      Barrier(comm);
      return;
  }
}

// Child body: returns the exit code. 0 = a survivor threw an Error saying the victim died (or,
// stopped, is the one that stalled), soon after. The victim runs collectives with the others
// until the fault.
int SurvivorOrVictim(int rank, int size, uint16_t port, Route route, Fault fault, Op op) {
  store::TcpStoreOptions so;
  so.port = port;
  so.token = testing::kToken;
  auto st = std::make_shared<store::TcpStore>(so);
  CommunicatorOptions o;
  o.rank = rank;
  o.size = size;
  o.store = st;
  o.token = testing::kToken;
  o.use_shm = route != Route::kTcp;
  if (route == Route::kShmPairs || route == Route::kHosts) {
    o.shm_pairs = route == Route::kShmPairs;
    o.host = "host-" + std::to_string(rank / 2);
    o.bind_address = "127.0.0.1";  // pretend hosts: names only
  }
  o.timeout = fault == Fault::kStop ? kStallTimeout : kTimeout;
  auto comm = Communicator::Create(o);
  std::vector<float> buf(1 << 16, 1.0f);
  for (int i = 0; i < 20; ++i) RunOp(*comm, op, buf);
  st->add("warm", 1);
  try {
    for (;;) RunOp(*comm, op, buf);  // the victim too: it is killed inside one of these
  } catch (const Error& e) {
    const int64_t failed_at = NowNs();
    if (rank == kVictim) {
      std::fprintf(stderr, "victim: failed before it was killed: %s\n", e.what());
      return 3;
    }
    if (fault == Fault::kKillWithoutStore || fault == Fault::kKillWithStoreStopped) {
      // The parent times the exit. Without the store, each survivor still names the victim as
      // the one whose process died: over TCP from the failure notices of the ranks that fail
      // and the victim's own connection, which ends with none; over shared memory from its pid
      // or the reason a failing rank left in the segment as it closed its end.
      const std::string what = e.what();
      const bool says = what.find(VictimName(route)) != std::string::npos &&
                        what.find("died") != std::string::npos;
      // A failure named that way needs nothing from a stopped store: no rank waits for it (its
      // answer, "did not answer within", would be in the message).
      const bool waited = what.find("did not answer") != std::string::npos;
      const bool ok = says && !waited;
      if (!ok || getenv("CADRE_TEST_VERBOSE") != nullptr) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
      return ok ? 0 : 5;
    }
    st->wait({"killed-at"}, std::chrono::seconds(30));
    const double s = static_cast<double>(failed_at - std::stoll(st->get_string("killed-at"))) / 1e9;
    const std::string what = e.what();
    const std::string victim = VictimName(route);
    const bool shm = route == Route::kShm;
    // Each survivor may time out waiting on its own neighbour, so the stalled rank must be
    // named as such, not merely mentioned.
    // Over shared memory the one that timed out says so, and wakes the others with its reason;
    // over TCP (and across pretend hosts) the failure records name the rank that never failed.
    const bool shm_says =
        what.find(victim + " did not reach step") != std::string::npos ||
        what.find("timed out waiting for " + victim + " (stalled") != std::string::npos;
    const bool tcp_says =
        what.find(victim + " has not failed with the others") != std::string::npos;
    const bool named = fault == Fault::kKill    ? what.find(victim) != std::string::npos
                       : route == Route::kHosts ? shm_says || tcp_says
                       : shm                    ? shm_says
                                                : tcp_says;
    const bool died = fault == Fault::kStop || what.find("died") != std::string::npos;
    if (!named || !died)
      std::fprintf(stderr, "rank %d: the error does not say rank %d %s: %s\n", rank, kVictim,
                   fault == Fault::kKill ? "died" : "stalled", e.what());
    // A stall is seen at the timeout, then each level of the hierarchical allreduce waits up to
    // 2 s (4 s at the top) for the others' failure records.
    const auto within = fault == Fault::kKill ? kDetectWithin : kStallTimeout * 5;
    const bool fast = s < std::chrono::duration<double>(within).count();
    if (!fast)
      std::fprintf(stderr, "rank %d: took %.1f s after the kill to fail (the timeout is %lld s)\n",
                   rank, s, static_cast<long long>(o.timeout.count() / 1000));
    return named && died && fast ? 0 : 5;
  }
}

void FaultOneRankMidCollective(Route route, Fault fault, Op op) {
  const int size = 4;
  // The ranks are forked before the store server starts its threads: a child forked while a
  // server thread held a lock (OpenSSL's random generator, during another rank's handshake)
  // would deadlock on it. Each child reads the server's port from a pipe.
  std::vector<pid_t> pids;
  std::vector<int> port_pipes;
  for (int r = 0; r < size; ++r) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[1]);
      uint16_t port = 0;
      if (read(fds[0], &port, sizeof port) != sizeof port) _exit(7);  // the parent failed
      int code = 6;
      try {
        code = SurvivorOrVictim(r, size, port, route, fault, op);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(code);
    }
    close(fds[0]);
    port_pipes.push_back(fds[1]);
    pids.push_back(pid);
  }
  store::TcpStoreServerOptions so;
  so.token = testing::kToken;
  // The store in a process of its own when it is to be stopped; else in this one.
  std::unique_ptr<store::TcpStoreServer> owned_server;
  pid_t store_pid = -1;
  uint16_t store_port = 0;
  if (fault == Fault::kKillWithStoreStopped) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    store_pid = fork();
    ASSERT_GE(store_pid, 0);
    if (store_pid == 0) {
      close(fds[0]);
      store::TcpStoreServer server(so);
      const uint16_t port = server.port();
      if (write(fds[1], &port, sizeof port) != sizeof port) _exit(1);
      for (;;) pause();  // killed by the parent
    }
    close(fds[1]);
    ASSERT_EQ(read(fds[0], &store_port, sizeof store_port),
              static_cast<ssize_t>(sizeof store_port));
    close(fds[0]);
  } else {
    owned_server = std::make_unique<store::TcpStoreServer>(so);
    store_port = owned_server->port();
  }
  for (int fd : port_pipes) {
    ASSERT_EQ(write(fd, &store_port, sizeof store_port), static_cast<ssize_t>(sizeof store_port));
    close(fd);
  }
  store::TcpStoreOptions co;
  co.port = store_port;
  co.token = testing::kToken;
  store::TcpStore client(co);
  client.set_timeout(std::chrono::seconds(60));
  client.wait({"warm"});
  while (client.add("warm", 0) < size) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));   // every rank is in a collective
  if (fault == Fault::kKillWithoutStore) owned_server.reset();  // closes every connection
  if (fault == Fault::kKillWithStoreStopped) kill(store_pid, SIGSTOP);
  const int64_t killed_at = NowNs();
  kill(pids[kVictim], fault == Fault::kStop ? SIGSTOP : SIGKILL);
  const bool no_store = fault == Fault::kKillWithoutStore || fault == Fault::kKillWithStoreStopped;
  if (!no_store) client.set_string("killed-at", std::to_string(killed_at));
  // Past the survivors' timeout, so that one that only times out reports it (exit code 5).
  // Without the store the survivors cannot report their time: they must end within kDetectWithin
  // (the store's own timeout is kTimeout).
  auto deadline = std::chrono::steady_clock::now() +
                  (no_store ? Duration(kDetectWithin) : kTimeout + std::chrono::seconds(30));
  // The survivors first: a stopped victim is killed once they have ended.
  std::vector<int> order;
  for (int r = 0; r < size; ++r) {
    if (r != kVictim) order.push_back(r);
  }
  order.push_back(kVictim);
  for (int r : order) {
    if (r == kVictim && fault == Fault::kStop) kill(pids[r], SIGKILL);
    int status = 0;
    pid_t got = 0;
    while ((got = waitpid(pids[r], &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (got == 0) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &status, 0);
      ADD_FAILURE() << "rank " << r << " hung after rank " << kVictim << " was killed";
      continue;
    }
    if (r == kVictim) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
          << "the victim stopped taking part before it was killed (status " << status << ")";
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "rank " << r << " exit status " << status;
    }
  }
  if (store_pid > 0) {
    kill(store_pid, SIGKILL);
    waitpid(store_pid, nullptr, 0);
  }
}

// route x fault x collective.
using FaultCase = std::tuple<Route, Fault, Op>;

class FaultMatrixTest : public ::testing::TestWithParam<FaultCase> {};

// A stopped rank fails no connection: over the ring the survivors time out each waiting on its
// neighbour, and the first to record its failure once blamed an innocent one ("rank 0: ...
// waiting for rank 3") on every rank.
TEST_P(FaultMatrixTest, EverySurvivorNamesTheRank) {
  const auto& [route, fault, op] = GetParam();
  FaultOneRankMidCollective(route, fault, op);
}

std::string FaultCaseName(const ::testing::TestParamInfo<FaultCase>& info) {
  const auto& [route, fault, op] = info.param;
  const char* what = fault == Fault::kKill               ? "Sigkill"
                     : fault == Fault::kStop             ? "Sigstop"
                     : fault == Fault::kKillWithoutStore ? "SigkillWithoutStore"
                                                         : "SigkillWithStoreStopped";
  const char* how = route == Route::kShm     ? "Shm"
                    : route == Route::kTcp   ? "Tcp"
                    : route == Route::kHosts ? "Hosts"
                                             : "ShmPairs";
  return std::string(how) + what + OpName(op);
}

INSTANTIATE_TEST_SUITE_P(
    Tcp, FaultMatrixTest,
    ::testing::Combine(::testing::Values(Route::kTcp),
                       ::testing::Values(Fault::kKill, Fault::kStop, Fault::kKillWithoutStore),
                       ::testing::Values(Op::kAllreduceRing, Op::kAllreduceHalvingDoubling,
                                         Op::kAllreduceRecursiveDoubling, Op::kBroadcast,
                                         Op::kAllgather, Op::kBarrier)),
    FaultCaseName);
INSTANTIATE_TEST_SUITE_P(
    Shm, FaultMatrixTest,
    ::testing::Combine(::testing::Values(Route::kShm),
                       ::testing::Values(Fault::kKill, Fault::kStop, Fault::kKillWithoutStore),
                       ::testing::Values(Op::kAllreduceRing, Op::kAllreduceSmall, Op::kBroadcast,
                                         Op::kAllgather, Op::kBarrier)),
    FaultCaseName);

// Two hosts of two ranks, shared-memory pairs inside each: every flat algorithm (the hierarchical
// one does not use the pairs) and the other collectives; a stall once (each takes the timeout).
INSTANTIATE_TEST_SUITE_P(
    ShmPairs, FaultMatrixTest,
    ::testing::Combine(::testing::Values(Route::kShmPairs),
                       ::testing::Values(Fault::kKill, Fault::kKillWithoutStore),
                       ::testing::Values(Op::kAllreduceRing, Op::kAllreduceHalvingDoubling,
                                         Op::kAllreduceRecursiveDoubling, Op::kBroadcast,
                                         Op::kAllgather, Op::kBarrier)),
    FaultCaseName);
INSTANTIATE_TEST_SUITE_P(ShmPairsStall, FaultMatrixTest,
                         ::testing::Values(FaultCase{Route::kShmPairs, Fault::kStop,
                                                     Op::kAllreduceRing}),
                         FaultCaseName);

// The hierarchical allreduce over two pretend hosts: the victim is local rank 0 of the second.
INSTANTIATE_TEST_SUITE_P(Hosts, FaultMatrixTest,
                         ::testing::Combine(::testing::Values(Route::kHosts),
                                            ::testing::Values(Fault::kKill, Fault::kStop,
                                                              Fault::kKillWithoutStore),
                                            ::testing::Values(Op::kAllreduceHierarchical)),
                         FaultCaseName);

// The store's process stopped (SIGSTOP) when a rank dies: over the ring, and across two pretend
// hosts in the hierarchical allreduce (two levels, each failing in turn).
INSTANTIATE_TEST_SUITE_P(StoreStopped, FaultMatrixTest,
                         ::testing::Values(FaultCase{Route::kTcp, Fault::kKillWithStoreStopped,
                                                     Op::kAllreduceRing},
                                           FaultCase{Route::kHosts, Fault::kKillWithStoreStopped,
                                                     Op::kAllreduceHierarchical}),
                         FaultCaseName);

// The store's process dies while rank 0 waits in the rendezvous for rank 1: the error blames the
// store (kIo, as the store reported it), not rank 1 for "not joining" (kTimeout).
TEST(FailureTest, AStoreThatDiesDuringTheRendezvousIsBlamedNotThePeer) {
  store::TcpStoreServerOptions so;
  so.token = testing::kToken;
  auto server = std::make_unique<store::TcpStoreServer>(so);
  store::TcpStoreOptions co;
  co.port = server->port();
  co.token = testing::kToken;
  co.connect_timeout = std::chrono::seconds(30);
  co.timeout = std::chrono::seconds(30);
  CommunicatorOptions o;
  o.rank = 0;
  o.size = 2;
  o.store = std::make_shared<store::TcpStore>(co);
  o.token = testing::kToken;
  o.use_shm = false;
  o.timeout = std::chrono::seconds(30);
  Code code = Code::kOk;
  std::string what;
  std::thread rank0([&] {
    try {
      Communicator::Create(o);
    } catch (const Error& e) {
      code = e.code();
      what = e.what();
    }
  });
  {
    store::TcpStore watcher(co);
    watcher.wait({"cadre-comm/1/host/0"}, std::chrono::seconds(30));  // rank 0 waits for rank 1
  }
  server.reset();
  rank0.join();
  EXPECT_EQ(code, Code::kIo) << what;
  // Rank 0 may still be reading its own key when the store goes: it blames the store either way.
  EXPECT_NE(what.find("the rendezvous store failed before rank "), std::string::npos) << what;
  EXPECT_EQ(what.find("did not join"), std::string::npos) << what;
}

TEST(FailureTest, WrongTokenIsRefused) {
  CommunicatorOptions base;
  base.use_shm = false;
  base.timeout = std::chrono::seconds(2);
  auto store = std::make_shared<store::HashStore>();
  std::vector<Code> codes(2, Code::kOk);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorOptions o = testing::RankOptions(base, r, 2);
      o.store = store;
      if (r == 1) o.token = "not-the-job-token";
      try {
        Communicator::Create(o);
      } catch (const Error& e) {
        codes[r] = e.code();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(codes[1], Code::kAuth);     // the impostor learns it was refused
  EXPECT_EQ(codes[0], Code::kTimeout);  // the real rank never got its peer
}

TEST(TopologyTest, PretendHostsSubgroupsLocalAndCross) {
  CommunicatorOptions base;
  base.bind_address = "127.0.0.1";
  base.timeout = std::chrono::seconds(20);
  // Hosts a a b b b: not homogeneous.
  auto host = [](int r) { return r < 2 ? std::string("host-a") : std::string("host-b"); };
  testing::RunRanks(
      5, base,
      [&](Communicator& comm) {
        const Topology& t = comm.topology();
        int r = comm.rank();
        EXPECT_EQ(t.cross_size, 2);
        EXPECT_EQ(t.cross_rank, r < 2 ? 0 : 1);
        EXPECT_EQ(t.local_size, r < 2 ? 2 : 3);
        EXPECT_EQ(t.local_rank, r < 2 ? r : r - 2);
        EXPECT_FALSE(t.homogeneous);
        Communicator& local = comm.Local();
        EXPECT_EQ(local.size(), t.local_size);
        EXPECT_EQ(local.rank(), t.local_rank);
        EXPECT_EQ(local.topology().cross_size, 1);
        int64_t v = r + 1;
        AllreduceOptions ar;
        ar.input = ar.output = &v;
        ar.count = 1;
        ar.dtype = DataType::kInt64;
        Allreduce(local, ar);
        EXPECT_EQ(v, r < 2 ? 1 + 2 : 3 + 4 + 5);
        if (t.local_rank < 2) {  // local rank 2 exists on host-b only: a cross group of one
          Communicator& cross = comm.Cross();
          EXPECT_EQ(cross.size(), 2);
        }
        v = r + 1;
        Allreduce(comm, ar);  // flat over TCP (hosts differ in size)
        EXPECT_EQ(v, 15);
        if (r == 1 || r == 4) {
          auto sub = comm.Subgroup({4, 1}, "pair");
          EXPECT_EQ(sub->rank(), r == 4 ? 0 : 1);
          v = r;
          Allreduce(*sub, ar);
          EXPECT_EQ(v, 5);
        }
      },
      host);
}

TEST(TopologyTest, RanksOnSeveralHostsListenOnTheirOwnAddressOnly) {
  // Two pretend hosts with real loopback addresses. Rank 0 must listen on its host's address,
  // not on every interface: from another address of the machine its port is closed.
  auto store = std::make_shared<store::HashStore>();
  CommunicatorOptions base;
  base.timeout = std::chrono::seconds(30);
  std::vector<std::unique_ptr<Communicator>> comms(2);
  std::vector<std::string> errors(2);
  auto start = [&](int r) {
    return std::thread([&, r] {
      CommunicatorOptions o = testing::RankOptions(base, r, 2);
      o.store = store;
      o.host = r == 0 ? "127.0.0.2" : "127.0.0.3";
      try {
        comms[r] = Communicator::Create(o);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  };
  // Rank 1's host name is published ahead of rank 1 itself (the key it writes first), so that
  // rank 0 gets through the rendezvous to listening and waits there for rank 1 to connect.
  store->set_string("cadre-comm/1/host/1", "127.0.0.3");
  std::thread rank0 = start(0);
  const std::string key = "cadre-comm/1/tcp-addr/0";
  std::string published;
  try {
    store->wait({key}, std::chrono::seconds(30));
    published = store->get_string(key);
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
  net::HostPort addr;
  const bool parsed = net::ParseHostPort(published, key, &addr).ok();
  EXPECT_TRUE(parsed) << published;
  EXPECT_EQ(addr.host, "127.0.0.2");
  if (parsed) {
    net::Socket probe;
    Status other = net::Socket::Connect("127.0.0.1", addr.port, Deadline(Duration(300)), &probe);
    EXPECT_FALSE(other.ok()) << "rank 0's port answers on 127.0.0.1: it listens everywhere";
  }
  std::thread rank1 = start(1);
  rank0.join();
  rank1.join();
  ASSERT_EQ(errors[0] + errors[1], "");
  std::vector<std::thread> threads;
  std::vector<int64_t> v = {1, 2};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      AllreduceOptions ar;
      ar.input = ar.output = &v[r];
      ar.count = 1;
      ar.dtype = DataType::kInt64;
      Allreduce(*comms[r], ar);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(v, (std::vector<int64_t>{3, 3}));
}

}  // namespace
}  // namespace cadre::comm
