// cadre-serve: the scorer as a program of its own (so that the `cadre` program does not link
// libtorch; `cadre serve` execs it). Serves one model folder saved by cadre.save_model.
//
//   cadre-serve MODEL_DIR [--port P] [--host H] [--name NAME] [--device auto|cpu|cuda[:N]]
//               [--max-batch-size N] [--max-batch-delay MS] [--inference-threads N]
//               [--intra-op-threads N] [--inter-op-threads N] [--http-threads N]
//               [--max-request-bytes N] [--port-file PATH] [--error-fd FD]
//
// The bearer token, when required, comes from the environment (CADRE_SERVE_TOKEN), never the
// command line, where other users could read it. SIGTERM or SIGINT: readiness turns 503, the
// listener closes, every request already sent is answered, and the program exits 0; a second
// signal exits 130 at once, as `cadre server` does.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cadre/cli/usage.h"
#include "cadre/serving/batcher.h"
#include "cadre/serving/server.h"
#include "cadre/serving/signature.h"
#include "cadre/serving/torch_model.h"

namespace {

struct Flags {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string name;
  std::string device = "auto";
  int64_t max_batch_size = 32;
  double max_batch_delay_ms = 0;
  int inference_threads = 1;
  int intra_op_threads = 0;
  int inter_op_threads = 0;
  int http_threads = 64;
  size_t max_request_bytes = 32 << 20;
  std::string port_file;
  int error_fd = -1;
};

// Writes `port` to `path` (through PATH.tmp and a rename, so that a reader never sees half of
// it); false with the system's own reason (a full disk says so) in *error.
bool WritePortFile(const std::string& path, int port, std::string* error) {
  std::string tmp = path + ".tmp", text = std::to_string(port) + "\n";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            fsync(fd) == 0;
  int saved = errno;
  if (fd >= 0 && close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    saved = errno;
  }
  if (!ok) *error = "cannot write " + path + ": " + std::strerror(saved);
  return ok;
}

// To stderr (serve.log under `cadre server`) and to --error-fd, which a full disk does not stop.
int Fail(const Flags& f, const std::string& message, int code = 1) {
  std::string line = "cadre-serve: " + message + "\n";
  std::cerr << line << std::flush;
  if (f.error_fd >= 0 && write(f.error_fd, line.data(), line.size()) < 0) {
    // stderr has it already; the supervisor's pipe is gone
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"cadre-serve: online scoring of a model saved by cadre.save_model"};
  app.add_option("model_dir", f.model_dir, "The model folder (model.json, model.pt)")->required();
  app.add_option("--port", f.port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--host", f.host, "Address to listen on");
  app.add_option("--name", f.name, "The model's name in the routes (default: the folder's)");
  app.add_option("--device", f.device, "auto (a GPU when libtorch has CUDA), cpu, cuda, cuda:N");
  app.add_option("--max-batch-size", f.max_batch_size, "Most rows in one batch (1: no batching)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--max-batch-delay", f.max_batch_delay_ms,
                 "Milliseconds a batch may wait for more requests (0: only what is waiting)")
      ->check(cadre::cli::NumberIn(0, 10000));
  app.add_option("--inference-threads", f.inference_threads, "Batches run at once")
      ->check(CLI::Range(1, 256));
  app.add_option("--intra-op-threads", f.intra_op_threads,
                 "libtorch threads inside one batch (0: cores / inference threads)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--inter-op-threads", f.inter_op_threads, "libtorch inter-op threads (0: default)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--http-threads", f.http_threads, "Requests served at once")
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-request-bytes", f.max_request_bytes, "Larger request bodies get 413")
      ->check(CLI::Range(size_t{1}, size_t{1} << 62));
  app.add_option("--port-file", f.port_file, "Write the port listened on to this file");
  app.add_option("--error-fd", f.error_fd,
                 "Also write the error that ends the program to this open file descriptor "
                 "(a supervisor's pipe, heard even when the disk is full)")
      ->check(CLI::Range(0, 1 << 20));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line naming the option or argument, as `cadre` does (cli/usage.h); `cadre serve`
    // execs this program with that argv[0], so the line names what the user typed.
    const std::string program = std::filesystem::path(argv[0]).filename().string();
    std::string line = program + ": " + cadre::cli::DescribeParseError(e, app, app.remaining());
    if (e.get_name() == "RequiredError") line += " (the model folder saved by cadre.save_model)";
    std::cerr << line << "\n";
    return 2;
  }

  // Signals go to one thread that stops the server; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  namespace fs = std::filesystem;
  fs::path dir = fs::absolute(f.model_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  if (f.name.empty()) f.name = dir.filename().string();
  if (f.name.empty() || f.name.find('/') != std::string::npos) {
    // The routes take the name as one path segment: /v2/models/NAME/infer.
    return Fail(f,
                "--name: '" + f.name + "' cannot be a model's name in a route (one path " +
                    "segment, without '/')",
                2);
  }
  cadre::serving::ModelSignature signature;
  if (auto s = cadre::serving::LoadSignature(dir, &signature); !s.ok())
    return Fail(f, s.message(), 2);

  std::string device;
  if (auto s = cadre::serving::ResolveDevice(f.device, &device); !s.ok())
    return Fail(f, s.message(), 2);
  int intra = f.intra_op_threads;
  if (intra == 0) {
    intra =
        std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / f.inference_threads);
  }
  cadre::serving::ConfigureTorchThreads(intra, f.inter_op_threads);
  std::unique_ptr<cadre::serving::Model> model;
  if (auto s = cadre::serving::LoadTorchModel(dir, signature, device, &model); !s.ok()) {
    return Fail(f, s.message(), 2);
  }

  cadre::serving::Metrics metrics(f.max_batch_size);
  cadre::serving::BatcherOptions batching;
  batching.max_batch_size = f.max_batch_size;
  batching.max_batch_delay =
      std::chrono::microseconds(static_cast<int64_t>(f.max_batch_delay_ms * 1000));
  batching.threads = f.inference_threads;
  cadre::serving::Batcher batcher(*model, batching, &metrics);

  cadre::serving::ServerOptions options;
  options.model_name = f.name;
  options.device = model->device();
  options.max_request_bytes = f.max_request_bytes;
  options.http_threads = f.http_threads;
  if (const char* token = std::getenv("CADRE_SERVE_TOKEN")) options.token = token;
  cadre::serving::ScoringServer server(options, signature, batcher, metrics);
  std::string error;
  int port = server.Bind(f.host, f.port, &error);
  if (port < 0) return Fail(f, error);
  if (std::string why; !f.port_file.empty() && !WritePortFile(f.port_file, port, &why)) {
    return Fail(f, "--port-file: " + why, 2);
  }
  std::cout << "cadre-serve: model '" << f.name << "' from " << dir.string() << " on device "
            << model->device() << "\n"
            << "cadre-serve: batches of up to " << f.max_batch_size << " rows, waiting up to "
            << f.max_batch_delay_ms << " ms; " << f.inference_threads << " inference thread(s) x "
            << intra << " intra-op thread(s); " << f.http_threads << " HTTP threads\n"
            << "cadre-serve: listening on http://" << f.host << ":" << port << " (POST /v2/models/"
            << f.name << "/infer, /ml/v4/deployments/" << f.name << "/predictions)" << std::endl;

  // The first signal stops the server gracefully; a second one (Ctrl-C again) ends the program
  // at once, dropping what is still in flight.
  std::atomic<bool> listening{true};
  std::thread stopper([&] {
    for (int seen = 0;; ++seen) {
      int sig = 0;
      sigwait(&signals, &sig);
      if (!listening) return;
      if (seen > 0) {
        std::cout << "cadre-serve: stopping at once (signal " << sig << " again)" << std::endl;
        std::_Exit(130);
      }
      std::cout << "cadre-serve: stopping (signal " << sig << "): answering the requests "
                << "already sent; again to stop at once" << std::endl;
      server.Stop();
    }
  });
  bool ok = server.Listen();
  listening = false;
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  batcher.Stop();
  return ok ? 0 : Fail(f, "the server stopped with an error");
}
