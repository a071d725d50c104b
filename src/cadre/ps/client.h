// Client: a worker's connection to all parameter servers of a job.
//
// Declare() builds the ShardMap (see shard_map.h) over every variable and sends each partition to
// its server; Push/Pull/PushPull then split tensors by that map and send one RPC per group of
// partitions below `message_bytes`, keeping up to `max_in_flight` RPCs per server outstanding so
// that later partitions are on the wire while earlier ones are being applied and answered.
//
// A Client is used by one thread at a time (a worker's training loop); distinct Clients are
// independent, so a test process can hold many workers. Every call ends within `rpc_timeout`
// (`connect_timeout` for Declare, which waits for servers that are still starting), and within
// about `stall_timeout` once a server stops answering (ClientOptions). The first RPC that fails
// cancels the call's others, so a call fails as soon as one server does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/ps/optimizer.h"
#include "cadre/ps/shard_map.h"

namespace cadre::ps {

struct ClientOptions {
  std::vector<std::string> servers;  // host:port of each server, in server-index order
  int worker_id = 0;                 // 0-based
  std::string token;  // the job token: the TLS credentials derive from it (credentials.h)
  // Pipelining: a push-pull reply can only leave the server once its request arrived, so the
  // first reply waits one message and the last pushes' replies drain after the upload ends; both
  // scale with message_bytes, while the RPCs in flight (max_in_flight x message_bytes bytes)
  // keep the link busy. The defaults are the fastest of the combinations measured on emulated
  // links (docs/benchmarks.md, parameter servers).
  int64_t partition_bytes = 1 << 20;  // largest partition of a split variable
  int64_t message_bytes = 1 << 20;    // payload budget of one RPC (gRPC's default cap is 4 MiB)
  int max_in_flight = 4;              // outstanding RPCs per server
  Duration rpc_timeout = std::chrono::seconds(600);  // longer than the servers' step timeout
  Duration connect_timeout = std::chrono::seconds(120);
  // Liveness, apart from rpc_timeout: while calls to a server are in progress, the client pings
  // it (HTTP/2 keepalive) every stall_timeout / 2, and a ping left unanswered for
  // stall_timeout / 2 fails every call to that server at once (kIo: "stalled", naming it). gRPC's
  // own threads answer pings whatever the handlers do, so a slow transfer or a sync step that
  // waits for other workers goes on; a server process that is stopped, or whose host or link is
  // gone, is given up on within about stall_timeout instead of rpc_timeout.
  Duration stall_timeout = std::chrono::seconds(20);
};

struct Variable {
  std::string name;
  std::vector<int64_t> shape;
  const float* initial = nullptr;  // product(shape) values; read during Declare only
  OptimizerConfig optimizer;
  bool sync = true;
};

struct TensorView {
  TensorView() = default;
  TensorView(std::string n, const float* d, int64_t c, std::optional<float> rate = std::nullopt)
      : name(std::move(n)), data(d), count(c), lr(rate) {}
  std::string name;
  const float* data = nullptr;
  int64_t count = 0;
  std::optional<float> lr;  // pushes: the learning rate of this update; none: the declared one
  // Pushes: every hyper-parameter of this update (the kind is the declared one; lr, when set,
  // overrides its lr); none: the declared ones.
  std::optional<OptimizerConfig> hyper;
};

struct MutableTensorView {
  std::string name;
  float* data = nullptr;
  int64_t count = 0;
};

class Client {
 public:
  static Status Connect(const ClientOptions& options, std::unique_ptr<Client>* out);
  ~Client();

  // Declares every variable of the model, once per Client. Idempotent on the servers: the first
  // worker's initial values win; call Pull(0, ...) afterwards to start from them.
  Status Declare(const std::vector<Variable>& variables);

  // Gradients of `step` (the worker's own count, from 0).
  Status Push(int64_t step, const std::vector<TensorView>& grads);
  // Values after `step` updates (sync; waits) or the current values (async).
  Status Pull(int64_t step, const std::vector<MutableTensorView>& out);
  // Push(step, grads) then Pull(step + 1, out), pipelined partition by partition. out[i] receives
  // the variable of grads[i] (it may alias nothing else in the call).
  Status PushPull(int64_t step, const std::vector<TensorView>& grads,
                  const std::vector<MutableTensorView>& out);
  // Checkpoints: the optimizer state of each variable in `names` (its partitions joined), once
  // `step` updates were applied (sync; waits as Pull) or at once (async).
  Status GetOptimizerState(int64_t step, const std::vector<std::string>& names,
                           std::vector<OptimizerState>* out);
  // Replaces the optimizer state of each variable in `names` by states[i] (whole variables; the
  // client splits them by the shard map). All or nothing across the servers: every piece is
  // staged, and applied only once every server accepted its own (ServerState::StageState); a
  // refusal names the server and the variable, and changes nothing.
  Status SetOptimizerState(const std::vector<std::string>& names,
                           const std::vector<OptimizerState>& states);

  // Tells every server this worker finished. Idempotent.
  Status Done();

  const ShardMap& shard_map() const;
  int worker_id() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cadre::ps
