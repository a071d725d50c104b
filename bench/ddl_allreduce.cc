// Flat (cadre's own choice by size) vs hierarchical allreduce on emulated nodes (DDL mode's
// benchmark): flags and the emulated host's environment, handed to cadre/bench/ddl_allreduce.h.
// --flat picks the flat baselines: shm (default: same-host messages over shared memory), tcp
// (over TCP inside the host, the baseline before shared-memory pairs existed), or both.
//
// Run once per emulated host by `cadre netem exec` (docs/netem.md), which sets CADRE_NETEM_HOST,
// CADRE_NETEM_HOSTS, CADRE_NETEM_ADDRESS(ES) and CADRE_NETEM_LINK:
//   cadre netem exec --hosts 2 --link 1gbit -- build/bench/ddl_allreduce_bench --slots 2
// Each process holds `--slots` ranks as threads; host 0 serves the rendezvous store and prints
// the table (cadre/bench/ddl_allreduce.h). Sizes (B) take cadre's units: 4096, 64K, 16M.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "cadre/base/byte_size.h"
#include "cadre/base/env.h"
#include "cadre/base/status.h"
#include "cadre/bench/ddl_allreduce.h"
#include "cadre/comm/hierarchical.h"
#include "cadre/config/from_env.h"

namespace {

using namespace cadre;

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "ddl_allreduce_bench: %s\nusage: ddl_allreduce_bench [--slots N] [--port P] "
               "[--min-bytes B] [--max-bytes B] [--seconds S] [--max-reps R] [--pipeline-bytes B] "
               "[--pipeline-chunks K] [--streamed-bytes B] [--streamed-chunks K] [--host-grid AxB] "
               "[--flat shm|tcp|both]\n"
               "(run it under "
               "`cadre netem exec`)\n",
               why.c_str());
  std::exit(2);
}

bench::DdlAllreduceOptions ParseArgs(int argc, char** argv) {
  bench::DdlAllreduceOptions a;
  comm::HierarchyOptions& h = a.communicator.hierarchy;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) Usage(flag + " needs a value");
    const char* v = argv[++i];
    if (flag == "--flat") {
      const std::string f = v;
      if (f != "shm" && f != "tcp" && f != "both") Usage("--flat " + f + ": use shm, tcp or both");
      a.flat_shm = f != "tcp";
      a.flat_tcp = f != "shm";
      continue;
    }
    if (flag == "--host-grid") {
      if (Status st = comm::ParseGrid(v, &h.host_grid); !st.ok()) Usage(st.message());
      continue;
    }
    if (flag.size() > 6 && flag.compare(flag.size() - 6, 6, "-bytes") == 0) {
      uint64_t bytes = 0;  // the units of every size on cadre's command lines
      if (Status st = ParseByteSize(v, &bytes); !st.ok()) Usage(flag + ": " + st.message());
      if (bytes == 0 && flag.rfind("--pipeline-", 0) != 0 && flag.rfind("--streamed-", 0) != 0)
        Usage(flag + " " + v + ": not a positive number");
      if (flag == "--min-bytes")
        a.min_bytes = bytes;
      else if (flag == "--max-bytes")
        a.max_bytes = bytes;
      else if (flag == "--pipeline-bytes")
        h.pipeline_bytes = bytes;
      else if (flag == "--streamed-bytes")
        h.streamed_pipeline_bytes = bytes;
      else
        Usage("unknown flag " + flag);
      continue;
    }
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (*v == '\0' || *end != '\0' || x < 0 ||
        (x == 0 && flag.rfind("--pipeline-", 0) != 0 && flag.rfind("--streamed-", 0) != 0)) {
      Usage(flag + " " + v + ": not a positive number");
    }
    if (flag == "--slots")
      a.slots = static_cast<int>(x);
    else if (flag == "--port")
      a.port = static_cast<uint16_t>(x);
    else if (flag == "--seconds")
      a.seconds_per_size = x;
    else if (flag == "--max-reps")
      a.max_reps = static_cast<int>(x);
    else if (flag == "--pipeline-chunks")
      h.pipeline_chunks = static_cast<size_t>(x);
    else if (flag == "--streamed-chunks")
      h.streamed_pipeline_chunks = static_cast<size_t>(x);
    else
      Usage("unknown flag " + flag);
  }
  return a;
}

std::string Need(const char* name) {
  auto v = GetEnv(name);
  if (!v || v->empty()) Usage(std::string(name) + " is not set");
  return *v;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t end; (end = s.find(sep, start)) != std::string::npos; start = end + 1) {
    out.push_back(s.substr(start, end - start));
  }
  out.push_back(s.substr(start));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::DdlAllreduceOptions options = ParseArgs(argc, argv);
  try {
    bench::DdlHost host;
    host.host = std::stoi(Need("CADRE_NETEM_HOST"));
    host.hosts = std::stoi(Need("CADRE_NETEM_HOSTS"));
    host.address = Need("CADRE_NETEM_ADDRESS");
    host.addresses = Split(Need("CADRE_NETEM_ADDRESSES"), ',');
    host.link = Need("CADRE_NETEM_LINK");
    host.token = GetEnv("CADRE_JOB_TOKEN").value_or("ddl-bench");
    // CADRE_SHM_SLOT_BYTES, CADRE_SHM_SPIN_US, CADRE_HOSTS
    config::ReadCommunicatorTunables(&options.communicator);
    return bench::RunDdlAllreduceHost(options, host);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddl_allreduce_bench: %s\n", e.what());
    return 1;
  }
}
