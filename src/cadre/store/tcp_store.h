// TcpStore: the Store that ranks of a job share over TCP.
//
// TcpStoreServer holds the keys. It runs its own event-loop thread, accepts any number of
// clients, and authenticates each with the job-token handshake (net/handshake.h) before serving
// it; connections still authenticating are capped (max_unauthenticated, oldest dropped first) and
// their refusals logged with the peer's identity quoted (base/printable.h). get() and wait() are
// answered when the keys exist: the server parks the request and wakes it on set()/add(), or
// answers kTimeout naming the missing keys when the request's timeout passes. A client that sends
// garbage, fails the handshake, stalls in the handshake, or disconnects is closed alone; the server
// and every other client carry on.
//
// TcpStore is the client, a store::Store. It connects (retrying until its connect timeout, since
// the server may start later), handshakes, and then sends one request at a time over one
// connection; it is thread-safe (a mutex serialises requests). Store errors keep their codes:
// kTimeout for missing keys, kInvalidArgument for add() on a non-counter; kIo when the server is
// gone or stalls (the client then reconnects on its next call), kAuth for a wrong token.
//
// The job runner runs a TcpStoreServer and gives learners CADRE_STORE=host:port and
// CADRE_JOB_TOKEN; config::ConnectStoreFromEnv() (config/from_env.h) is the learner's side of
// that contract. Nothing here reads the environment.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cadre/base/deadline.h"
#include "cadre/net/socket.h"
#include "cadre/store/store.h"

namespace cadre::store {

// Largest key and value accepted by the server (a larger request closes that client).
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = size_t{256} << 20;

struct TcpStoreServerOptions {
  // Address to listen on; "" or "0.0.0.0" for every interface. Port 0 picks a free port.
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  // The job token every client must prove it holds; an empty one is refused (kInvalidArgument).
  std::string token;
  // A connection that has not finished the handshake by then is closed.
  Duration handshake_timeout = std::chrono::seconds(10);
  // At most this many connections may be waiting to authenticate; a new one beyond it closes
  // the oldest. Bounds what strangers can hold (descriptors, buffers) however many connect.
  size_t max_unauthenticated = 64;
  // A hosts(5) file consulted for `host` before getaddrinfo (net/resolver.h); empty: none.
  std::string hosts_file;
};

class TcpStoreServerImpl;

class TcpStoreServer {
 public:
  // Binds, listens and starts the server thread. Throws cadre::Error (kIo naming host:port when
  // the address cannot be bound, kInvalidArgument for an empty token).
  explicit TcpStoreServer(TcpStoreServerOptions options);
  // Stops the thread and closes every connection; parked clients see the connection close.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const;
  // "host:port" as clients should dial it (the listen host, 127.0.0.1 for a wildcard).
  std::string address() const;
  // Authenticated clients connected right now (for tests and diagnostics).
  size_t num_clients() const;
  // Requests parked waiting for keys, and the keys they wait on, right now (for tests and
  // diagnostics: a request that expired or whose client left leaves nothing behind).
  size_t num_parked() const;

 private:
  std::unique_ptr<TcpStoreServerImpl> impl_;
  std::thread thread_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string token;
  // How this client names itself to the server (it appears in the server's log lines).
  std::string identity = "store-client";
  // How long to keep retrying the first connection (and each reconnection; but a reconnection
  // that is refused, the server having gone, fails at once).
  Duration connect_timeout = std::chrono::seconds(60);
  // The store's timeout for get()/wait() (Store::timeout()).
  Duration timeout = Store::kDefaultTimeout;
  // A hosts(5) file consulted for `host` before getaddrinfo (net/resolver.h); empty: none.
  std::string hosts_file;
};

class TcpStore final : public Store {
 public:
  // Connects and handshakes; throws cadre::Error when that fails within connect_timeout
  // (kInvalidArgument at once for an empty token).
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;

 private:
  struct Reply;
  // Sends one request and reads its reply; throws cadre::Error. Caller holds mu_.
  Reply Call(uint8_t type, const std::vector<uint8_t>& payload, Duration server_wait);
  void EnsureConnectedLocked();

  TcpStoreOptions options_;
  std::mutex mu_;
  net::Socket socket_;           // GUARDED_BY(mu_); invalid after an I/O error until reconnected
  bool connected_once_ = false;  // GUARDED_BY(mu_); a reconnection does not wait for refusals
  uint64_t next_tag_ = 1;        // GUARDED_BY(mu_)
};

}  // namespace cadre::store
