// The parameter-server view of the learner contract (docs/manifest.md): which learners serve,
// where each server listens, and this learner's role, read from the environment the job runner
// (or a user by hand) sets:
//   LEARNER_ID (1..N), NUM_LEARNERS, LEARNER_NAME_PREFIX, PS_HOSTS_COUNT, CADRE_JOB_TOKEN,
//   optionally CADRE_LEARNER_ADDRESS (this learner's own address), CADRE_HOSTS (cadre's hosts
//   file when names do not resolve through the system) and CADRE_PS_PORT (default 2222).
// Learners 1..PS_HOSTS_COUNT are servers; the others are workers 0..W-1 in LEARNER_ID order.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::ps {

inline constexpr int kDefaultPort = 2222;

struct LearnerRole {
  bool is_server = false;
  int learner_id = 0;  // 1-based
  int num_learners = 0;
  int num_servers = 0;
  int num_workers = 0;
  int worker_id = -1;                         // 0-based among workers; -1 on a server
  std::string listen_address;                 // host:port this learner serves on (servers)
  std::vector<std::string> server_addresses;  // host:port of server 0..S-1
  std::string token;
};

// Reads the role from `env` (tests pass a map; RoleFromEnvironment reads the process's). Every
// missing or malformed variable is named in the error (kInvalidArgument).
Status RoleFromMap(const std::map<std::string, std::string>& env, LearnerRole* out);
Status RoleFromEnvironment(LearnerRole* out);

// "host:port" with `host` turned into a numeric address when it resolves (the hosts file
// `hosts_file`, the contract's CADRE_HOSTS, first when not empty, then the system resolver), so
// that gRPC and cadre agree on what a learner name means.
std::string ResolveHostPort(const std::string& host, int port, const std::string& hosts_file);

}  // namespace cadre::ps
