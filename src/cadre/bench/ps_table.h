// `cadre bench ps`: the parameter-server workload (ps_workload.h) over servers x workers x
// sizes, printed to stdout as one table row per configuration, by size, then servers, then
// workers.
//   RunPsTableLoopback   servers and workers are threads of this process on 127.0.0.1;
//   RunPsTableEmulated   one process per server and per worker, each on its own emulated node
//                        behind a shaped full-duplex link (docs/netem.md, root only); each row
//                        also shows the link bound and the fraction reached.
// In the emulated mode this process only builds the network and starts, per configuration, one
// `node_command` (RunPsNode's, in cadre `cadre bench ps-node`) per emulated host: host i < S is
// server i, host S + w is worker w, the rest exit at once. Workers write their step times into
// a private temporary folder that this process reads back; every process and the whole
// configuration have a timeout.
//
// Errors are thrown as cadre::Error (kInvalidArgument for bad input). Not thread-safe: one
// table at a time per process (it owns stdout while it runs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre::bench {

struct PsTableOptions {
  std::vector<int> servers{1, 2};     // server counts, each >= 1
  std::vector<int> workers{1, 2, 4};  // worker counts, each >= 1
  std::vector<int64_t> sizes;         // bytes, 4 B .. 1 GiB (ParsePsSizes)
  int iterations = 5;                 // timed steps per configuration
};

// "4K", "256K", "64M", ... (base/byte_size.h) -> bytes; each must lie in 4 B .. 1 GiB, else
// kInvalidArgument quoting the item.
std::vector<int64_t> ParsePsSizes(const std::vector<std::string>& sizes);

// Returns the exit code (0).
int RunPsTableLoopback(const PsTableOptions& options);

// `link` is a netem link spec (RATE[,DELAY[,LOSS]], e.g. "1gbit"). `node_command` starts one
// host's part: the flags of PsNodeOptions (--servers, --workers, --bytes, --iterations, --out,
// --token, --timeout) are appended to it. The caller keeps stop signals deferred for the call
// (the network must not be left half made). Returns the exit code (0).
int RunPsTableEmulated(const PsTableOptions& options, const std::string& link,
                       const std::vector<std::string>& node_command);

// One emulated host's part of a configuration of RunPsTableEmulated.
struct PsNodeOptions {
  int servers = 1;
  int workers = 1;
  int64_t bytes = 4096;
  int iterations = 5;
  std::string out_dir;  // where a worker writes its step times
  std::string token;
  double timeout_s = 300;
  int host = -1;                       // this host's index (CADRE_NETEM_HOST); < 0: not set
  std::vector<std::string> addresses;  // every host's address (CADRE_NETEM_ADDRESSES)
};

// Serves (host < servers), works (the next `workers` hosts) or returns at once. Returns the
// exit code (0).
int RunPsNode(const PsNodeOptions& options);

}  // namespace cadre::bench
