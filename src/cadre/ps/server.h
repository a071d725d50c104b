// Server: a parameter server process's gRPC endpoint (service ParameterServer in ps.proto) over a
// ServerState. gRPC stays behind this header: callers see only cadre types.
//
// The server listens with mutual TLS on credentials derived from the job token (credentials.h):
// a client without them never completes a connection, so no request of it is read. A failed
// Status becomes the matching gRPC status code (see ToGrpcCode in proto_util.cc): INVALID_ARGUMENT,
// NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION (a stale step or a worker that already said done),
// DEADLINE_EXCEEDED (a step timeout, naming missing workers).
#pragma once

#include <memory>
#include <string>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/ps/server_state.h"

namespace cadre::ps {

struct ServerOptions {
  std::string address = "0.0.0.0:2222";  // host:port; port 0 picks a free port
  int num_workers = 1;
  std::string token;  // the job token; the TLS credentials derive from it. Must not be empty.
  Duration step_timeout = std::chrono::seconds(300);  // how long a sync step may wait for workers
  // How long a worker that has not said done may have no request in progress before
  // WaitAllDone gives up on it (kIo naming it): workers that died without saying done.
  Duration worker_timeout = kDefaultWorkerTimeout;
  // A connection that has not finished its TLS handshake by then is closed (gRPC's own default
  // is 120 s), as the store and the transport close theirs: strangers do not pile up.
  Duration handshake_timeout = std::chrono::seconds(10);
};

class Server {
 public:
  // Binds and starts serving; fails (kIo) when the address cannot be bound, kInvalidArgument for
  // an empty token.
  static Status Start(const ServerOptions& options, std::unique_ptr<Server>* out);
  ~Server();  // Shutdown()

  int port() const;
  ServerState& state();

  // Blocks until every worker said done (kOk), the deadline (kTimeout), Shutdown (kAborted) or a
  // worker silent for worker_timeout (kIo, naming it).
  Status WaitAllDone(const Deadline& deadline);

  // Fails pending waits with kAborted, lets in-flight RPCs finish (up to 5 s) and stops.
  // Idempotent.
  void Shutdown();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cadre::ps
