// ScoringServer: the scorer's HTTP routes on a cpp-httplib server, for one model.
//
//   GET  /v2/health/live, /v2/health/ready       liveness; readiness (503 while stopping)
//   GET  /v2                                     server metadata
//   GET  /v2/models/NAME, /v2/models/NAME/ready  model metadata (inputs, outputs, device)
//   POST /v2/models/NAME/infer                   Open Inference Protocol v2 (codec.h)
//   POST /ml/v4/deployments/NAME/predictions     WML v4 payload (codec.h)
//   GET  /metrics                                Prometheus text (metrics.h)
//
// Errors are JSON: {"error": "..."} on /v2 routes, WML's {"errors": [{"code", "message"}],
// "status_code"} on /ml/v4; 400 for a malformed body (naming the field), 401 without the token
// (when one is set), 404 for another model's name, 413 for a body over `max_request_bytes`
// (refused from its Content-Length before it is read, also after Expect: 100-continue; a chunked
// body is cut off at the limit), 415 for a multipart form (any other body is read as JSON,
// whatever its Content-Type), 500 when the model fails on the input (the next request is
// served), 503 while stopping, 504 when the model does not answer in time. A handler never lets
// an exception out.
#pragma once

#include <cstddef>
#include <string>

#include "cadre/serving/batcher.h"
#include "cadre/serving/metrics.h"
#include "cadre/serving/signature.h"

namespace cadre::http {
class Server;
}  // namespace cadre::http

namespace cadre::serving {

struct ServerOptions {
  std::string model_name;
  std::string device = "cpu";           // reported in the model's metadata
  size_t max_request_bytes = 32 << 20;  // larger bodies: 413
  int http_threads = 64;                // requests served at once (waiting connections hold none)
  std::string token;                    // when set: "Authorization: Bearer TOKEN" required
                                        // (health routes excepted)
};

class ScoringServer {
 public:
  // `signature`, `batcher` and `metrics` must outlive the server.
  ScoringServer(ServerOptions options, const ModelSignature& signature, Batcher& batcher,
                Metrics& metrics);
  ~ScoringServer();

  // Binds `host:port` (port 0: any free port); returns the bound port, or -1 with *error set.
  int Bind(const std::string& host, int port, std::string* error);
  // Serves until Stop(); returns false if the server could not run.
  bool Listen();
  // Readiness turns 503 and the listener closes; every request already sent is answered (with
  // `Connection: close`), idle keep-alive connections are closed, and Listen() returns
  // (cadre/http/server.h). Any thread, any time, more than once.
  void Stop();

 private:
  void Register();

  ServerOptions options_;
  const ModelSignature& signature_;
  Batcher& batcher_;
  Metrics& metrics_;
  http::Server* http_;  // owned; a pointer so that this header does not include httplib
};

}  // namespace cadre::serving
