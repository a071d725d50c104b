#include "cadre/serving/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cadre/http/server.h"
#include "cadre/serving/codec.h"

namespace cadre::serving {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kJson = "application/json";
constexpr const char* kTooLarge = "the request body is larger than this server takes";
constexpr const char* kMultipart =
    "the body is a multipart form (curl -F); send the JSON itself with "
    "'Content-Type: application/json' (curl -d @FILE -H 'Content-Type: application/json')";

int HttpStatus(Code code) {
  switch (code) {
    case Code::kInvalidArgument:
      return 400;
    case Code::kAuth:
      return 401;
    case Code::kNotFound:
      return 404;
    case Code::kUnavailable:
      return 503;
    case Code::kTimeout:
      return 504;
    default:
      return 500;
  }
}

bool IsWml(const httplib::Request& req) { return req.path.rfind("/ml/", 0) == 0; }

std::string WmlCode(int status) {
  switch (status) {
    case 400:
      return "invalid_input_data";
    case 401:
      return "authentication_token_missing";
    case 404:
      return "deployment_not_found";
    case 413:
      return "payload_too_large";
    case 415:
      return "unsupported_media_type";
    case 503:
      return "deployment_unavailable";
    default:
      return status >= 500 ? "prediction_failed" : "invalid_request";
  }
}

void SetError(const httplib::Request& req, httplib::Response& res, int status,
              const std::string& message) {
  res.status = status;
  json doc;
  if (IsWml(req)) {
    doc = {{"errors", {{{"code", WmlCode(status)}, {"message", message}}}},
           {"status_code", status}};
  } else {
    doc = {{"error", message}};
  }
  res.set_content(doc.dump(-1, ' ', false, json::error_handler_t::replace), kJson);
}

// The body's length as the client announced it (0 when it did not).
uint64_t AnnouncedLength(const httplib::Request& req) {
  return std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
}

// Reads the request's body into *body, keeping at most `max_bytes` of it: cpp-httplib refuses a
// longer Content-Length itself, and `http` stops reading a chunked body, which has none, once it
// passes the limit (what is left of it is thrown away after the answer, as the connection
// closes). A multipart form is read and thrown away. On false the refusal (411, 413, 415, or 400
// for a body cut short) is set on `res`.
bool ReadBody(const http::Server& http, const httplib::Request& req, httplib::Response& res,
              const httplib::ContentReader& reader, size_t max_bytes, std::string* body) {
  // cpp-httplib 0.11 reads a body of unannounced length until the connection ends: `curl -X
  // POST` with no data would wait out the read timeout.
  if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
    SetError(req, res, 411,
             "a POST needs a body with a Content-Length (curl: -d @FILE -H 'Content-Type: "
             "application/json')");
    return false;
  }
  if (req.is_multipart_form_data()) {
    reader([](const httplib::MultipartFormData&) { return true; },
           [](const char*, size_t) { return true; });
    SetError(req, res, 415, kMultipart);
    return false;
  }
  bool over = false;
  const bool complete = reader([&](const char* data, size_t n) {
    over = over || body->size() + n > max_bytes;
    if (!over) body->append(data, n);
    return !over;
  });
  if (over || http.BodyCut(req) || AnnouncedLength(req) > max_bytes) {
    body->clear();
    SetError(req, res, 413, kTooLarge);
    // What the client still sends of the body is not read.
    res.set_header("Connection", "close");
    return false;
  }
  if (!complete) {
    SetError(req, res, 400, "the request body could not be read (cut short, or badly chunked)");
  }
  return complete;
}

bool SameToken(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

http::Limits LimitsOf(const ServerOptions& options) {
  http::Limits limits;
  limits.threads = static_cast<size_t>(std::max(1, options.http_threads));
  limits.max_requests = 1000000;
  return limits;
}

}  // namespace

ScoringServer::ScoringServer(ServerOptions options, const ModelSignature& signature,
                             Batcher& batcher, Metrics& metrics)
    : options_(std::move(options)),
      signature_(signature),
      batcher_(batcher),
      metrics_(metrics),
      http_(new http::Server(LimitsOf(options_))) {
  http_->set_payload_max_length(options_.max_request_bytes);
  // Not cpp-httplib's default, which adds SO_REUSEPORT: a second scorer on a port in use would
  // bind too, and the kernel would share the connections between the two models.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  Register();
}

ScoringServer::~ScoringServer() {
  Stop();
  delete http_;
}

int ScoringServer::Bind(const std::string& host, int port, std::string* error) {
  return http_->Bind(host, port, error);
}

bool ScoringServer::Listen() { return http_->Serve(); }

void ScoringServer::Stop() { http_->Stop(); }

void ScoringServer::Register() {
  httplib::Server& http = *http_;
  const std::string name = options_.model_name;

  // Body-less errors (httplib's own 404 and 413, a bad request line) get a JSON body too.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                 httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    // cpp-httplib parses a form-urlencoded body (what `curl -d` sends without a Content-Type)
    // as form fields and refuses one over 8 KiB with 413, whatever --max-request-bytes says.
    if (res.status == 413 &&
        req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
      SetError(req, res, 415,
               "the body is sent as application/x-www-form-urlencoded (curl -d without a "
               "Content-Type), which this server reads only up to 8 KiB; send it with "
               "'Content-Type: application/json'");
      return httplib::Server::HandlerResponse::Handled;
    }
    std::string message = res.status == 413   ? kTooLarge
                          : res.status == 404 ? "no route " + req.method + " " + req.path
                                              : "malformed request";
    SetError(req, res, res.status, message);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        SetError(req, res, 500, what);
      });
  // 413 from the announced length, before the body is read (also for Expect: 100-continue).
  const size_t max_bytes = options_.max_request_bytes;
  // cpp-httplib sends a refusal here as it finds it in `res`: status and body must be set.
  http.set_expect_100_continue_handler(
      [max_bytes](const httplib::Request& req, httplib::Response& res) {
        if (AnnouncedLength(req) <= max_bytes) return 100;
        SetError(req, res, 413, kTooLarge);
        // On this path cpp-httplib writes no Content-Length of its own.
        res.set_header("Content-Length", std::to_string(res.body.size()));
        res.set_header("Connection", "close");  // the client does not send the body
        return 413;
      });
  const std::string token = options_.token;
  http.set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
    if (token.empty() || req.path.rfind("/v2/health/", 0) == 0) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0 && SameToken(auth.substr(7), token)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    SetError(req, res, 401,
             auth.empty() ? "missing bearer token (Authorization: Bearer TOKEN)"
                          : "the bearer token is not valid for this model");
    return httplib::Server::HandlerResponse::Handled;
  });

  auto unknown = [name](const httplib::Request& req, httplib::Response& res,
                        const std::string& asked) {
    SetError(req, res, 404,
             "model '" + asked + "' is not served here (this server serves '" + name + "')");
  };

  http.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"live":true})", kJson);
  });
  http.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
    const bool stopping = http_->stopping();
    res.status = stopping ? 503 : 200;
    res.set_content(stopping ? R"({"ready":false})" : R"({"ready":true})", kJson);
  });
  http.Get("/v2", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"name":"cadre-serve","version":"1","extensions":[]})", kJson);
  });
  http.Get(R"(/v2/models/([^/]+))",
           [this, name, unknown](const httplib::Request& req, httplib::Response& res) {
             if (req.matches[1] != name) return unknown(req, res, req.matches[1]);
             res.set_content(EncodeV2Metadata(name, signature_, options_.device), kJson);
           });
  http.Get(R"(/v2/models/([^/]+)/ready)",
           [this, name, unknown](const httplib::Request& req, httplib::Response& res) {
             if (req.matches[1] != name) return unknown(req, res, req.matches[1]);
             const bool stopping = http_->stopping();
             res.status = stopping ? 503 : 200;
             res.set_content(json({{"name", name}, {"ready", !stopping}}).dump(), kJson);
           });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.Render(), "text/plain; version=0.0.4");
  });

  // The scoring routes read their body themselves (ReadBody), bounded also when it is chunked.
  // `score` decodes a body of the route's protocol, runs it and sets the answer on `res`, or
  // returns the error.
  auto post = [this, name, unknown](const char* pattern, const char* route, auto score) {
    http_->Post(pattern, [=, this](const httplib::Request& req, httplib::Response& res,
                                   const httplib::ContentReader& reader) {
      auto start = Clock::now();
      std::string body;
      if (!ReadBody(*http_, req, res, reader, options_.max_request_bytes, &body)) {
        // refused, and said so in `res`
      } else if (req.matches[1] != name) {
        unknown(req, res, req.matches[1]);
      } else if (Status s = score(body, res); !s.ok()) {
        SetError(req, res, HttpStatus(s.code()), s.message());
      } else {
        res.status = 200;
      }
      metrics_.CountRequest(route, res.status,
                            std::chrono::duration<double>(Clock::now() - start).count());
    });
  };
  post(R"(/v2/models/([^/]+)/infer)", "v2_infer",
       [this, name](const std::string& body, httplib::Response& res) {
         V2Request request;
         std::vector<HostTensor> outputs;
         Status s = DecodeV2Request(body, signature_, &request);
         if (s.ok()) s = batcher_.Infer(std::move(request.inputs), &outputs);
         if (s.ok()) res.set_content(EncodeV2Response(name, request, signature_, outputs), kJson);
         return s;
       });
  post(R"(/ml/v4/deployments/([^/]+)/predictions)", "wml_predictions",
       [this](const std::string& body, httplib::Response& res) {
         WmlRequest request;
         Status s = DecodeWmlRequest(body, signature_, &request);
         std::vector<std::vector<HostTensor>> outputs(request.groups.size());
         for (size_t g = 0; s.ok() && g < request.groups.size(); ++g) {
           s = batcher_.Infer(std::move(request.groups[g]), &outputs[g]);
         }
         if (s.ok()) res.set_content(EncodeWmlResponse(signature_, outputs), kJson);
         return s;
       });
}

}  // namespace cadre::serving
