// Crash semantics with real processes (Gloo keeps forking for exactly this): SIGKILL one rank in
// the middle of allreduces; every survivor must throw an error naming it within the timeout.
// Also: a rank with the wrong job token is refused, and topology/subgroups over pretend hosts.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cadre/comm/collectives.h"
#include "cadre/comm/comm_test_util.h"
#include "cadre/store/tcp_store.h"

namespace cadre::comm {
namespace {

constexpr int kVictim = 2;

// Child body: returns the exit code. 0 = threw an Error naming the victim in time.
int SurvivorOrVictim(int rank, int size, uint16_t port, bool shm) {
  store::TcpStoreOptions so;
  so.port = port;
  so.token = testing::kToken;
  auto st = std::make_shared<store::TcpStore>(so);
  CommunicatorOptions o;
  o.rank = rank;
  o.size = size;
  o.store = st;
  o.token = testing::kToken;
  o.use_shm = shm;
  o.timeout = std::chrono::seconds(3);
  auto comm = Communicator::Create(o);
  std::vector<float> buf(1 << 16, 1.0f);
  AllreduceOptions ar;
  ar.input = ar.output = buf.data();
  ar.count = buf.size();
  for (int i = 0; i < 20; ++i) Allreduce(*comm, ar);
  st->add("warm", 1);
  if (rank == kVictim) {
    pause();  // the parent kills us here; our peers block in the next allreduce
    return 3;
  }
  auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 1000000; ++i) Allreduce(*comm, ar);
    return 4;  // never failed
  } catch (const Error& e) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string what = e.what();
    bool named = what.find("rank " + std::to_string(kVictim)) != std::string::npos;
    if (!named)
      std::fprintf(stderr, "rank %d: error does not name the victim: %s\n", rank, e.what());
    if (s > 8) std::fprintf(stderr, "rank %d: took %.1f s to fail\n", rank, s);
    return named && s <= 8 ? 0 : 5;
  }
}

void KillOneRankMidAllreduce(bool shm) {
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
        code = SurvivorOrVictim(r, size, port, shm);
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
  store::TcpStoreServer server(so);
  for (int fd : port_pipes) {
    const uint16_t port = server.port();
    ASSERT_EQ(write(fd, &port, sizeof port), static_cast<ssize_t>(sizeof port));
    close(fd);
  }
  store::TcpStoreOptions co;
  co.port = server.port();
  co.token = testing::kToken;
  store::TcpStore client(co);
  client.set_timeout(std::chrono::seconds(30));
  client.wait({"warm"});
  while (client.add("warm", 0) < size) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // survivors are inside allreduce
  kill(pids[kVictim], SIGKILL);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int r = 0; r < size; ++r) {
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
      EXPECT_TRUE(WIFSIGNALED(status));
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "rank " << r << " exit status " << status;
    }
  }
}

TEST(FailureTest, SigkillOneRankOverSharedMemory) { KillOneRankMidAllreduce(true); }
TEST(FailureTest, SigkillOneRankOverTcp) { KillOneRankMidAllreduce(false); }

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

}  // namespace
}  // namespace cadre::comm
