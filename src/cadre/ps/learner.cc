#include "cadre/ps/learner.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstdlib>

#include "cadre/net/resolver.h"

extern char** environ;

namespace cadre::ps {
namespace {

Status IntVar(const std::map<std::string, std::string>& env, const char* name, int lo, int hi,
              int* out) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty())
    return InvalidArgument(std::string(name) + " is not set (the learner contract needs it)");
  char* end = nullptr;
  long v = std::strtol(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0' || v < lo || v > hi)
    return InvalidArgument(std::string(name) + "='" + it->second + "' is not an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  *out = static_cast<int>(v);
  return Status::Ok();
}

}  // namespace

std::string ResolveHostPort(const std::string& host, int port, const std::string& hosts_file) {
  std::string resolved = net::ResolveWithHostsFile(hosts_file, host);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(resolved.c_str(), nullptr, &hints, &res) == 0 && res != nullptr) {
    char buf[INET_ADDRSTRLEN];
    auto* sin = reinterpret_cast<sockaddr_in*>(res->ai_addr);
    if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)) != nullptr) resolved = buf;
    freeaddrinfo(res);
  }
  // Left as a name when it does not resolve now: gRPC retries resolution while connecting.
  return resolved + ":" + std::to_string(port);
}

Status RoleFromMap(const std::map<std::string, std::string>& env, LearnerRole* out) {
  LearnerRole r;
  CADRE_RETURN_IF_ERROR(IntVar(env, "NUM_LEARNERS", 1, 1 << 16, &r.num_learners));
  CADRE_RETURN_IF_ERROR(IntVar(env, "LEARNER_ID", 1, r.num_learners, &r.learner_id));
  // The learner contract of the allreduce modes has no servers: say which job has them.
  auto servers = env.find("PS_HOSTS_COUNT");
  if (servers == env.end() || servers->second.empty())
    return InvalidArgument(
        "PS_HOSTS_COUNT is not set: learners have parameter-server roles only in a "
        "parameter-server job (framework `pytorch` with `parameter_servers`, e.g. `cadre run "
        "--framework pytorch --parameter-servers 1 ...`)");
  if (servers->second == "0")
    return InvalidArgument(
        "PS_HOSTS_COUNT is 0: this job has no parameter servers (`parameter_servers: 0`, or a "
        "single learner, which is a plain job); parameter-server training needs at least 1 "
        "server and 1 worker, e.g. `cadre run -n 3 --framework pytorch --parameter-servers 1`");
  CADRE_RETURN_IF_ERROR(IntVar(env, "PS_HOSTS_COUNT", 1, r.num_learners, &r.num_servers));
  r.num_workers = r.num_learners - r.num_servers;
  if (r.num_workers < 1)
    return InvalidArgument(
        "PS_HOSTS_COUNT=" + std::to_string(r.num_servers) +
        " leaves no workers among NUM_LEARNERS=" + std::to_string(r.num_learners));
  int port = kDefaultPort;
  if (env.count("CADRE_PS_PORT"))
    CADRE_RETURN_IF_ERROR(IntVar(env, "CADRE_PS_PORT", 1, 65535, &port));
  auto prefix = env.find("LEARNER_NAME_PREFIX");
  if (prefix == env.end() || prefix->second.empty())
    return InvalidArgument("LEARNER_NAME_PREFIX is not set (the learner contract needs it)");
  auto hosts = env.find("CADRE_HOSTS");
  const std::string hosts_file = hosts != env.end() ? hosts->second : std::string();
  for (int id = 1; id <= r.num_servers; ++id) {
    r.server_addresses.push_back(
        ResolveHostPort(prefix->second + "-" + std::to_string(id), port, hosts_file));
  }
  r.is_server = r.learner_id <= r.num_servers;
  if (r.is_server) {
    auto own = env.find("CADRE_LEARNER_ADDRESS");
    r.listen_address = own != env.end() && !own->second.empty()
                           ? own->second + ":" + std::to_string(port)
                           : r.server_addresses[static_cast<size_t>(r.learner_id - 1)];
  } else {
    r.worker_id = r.learner_id - r.num_servers - 1;
  }
  auto token = env.find("CADRE_JOB_TOKEN");
  if (token != env.end()) r.token = token->second;
  *out = std::move(r);
  return Status::Ok();
}

Status RoleFromEnvironment(LearnerRole* out) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return RoleFromMap(env, out);
}

}  // namespace cadre::ps
