#include "cadre/launch/contract.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <utility>

#include "cadre/launch/gpu_plan.h"

namespace cadre::launch {
namespace {

namespace fs = std::filesystem;

std::string Str(int v) { return std::to_string(v); }

// TF_CONFIG for the parameter-server mode: servers are "ps", the rest "worker".
std::string TfConfig(const LearnerContract& c) {
  const JobContract& job = c.job;
  auto endpoint = [&](const LearnerHost& h) {
    return "\"" + (job.names_resolve ? h.name : h.address) + ":" + Str(kLearnerPort) + "\"";
  };
  std::string ps, workers;
  for (const auto& h : job.hosts) {
    std::string& list = job.is_server(h.id) ? ps : workers;
    if (!list.empty()) list += ",";
    list += endpoint(h);
  }
  bool server = job.is_server(c.learner_id);
  int index = server ? c.learner_id - 1 : c.learner_id - 1 - job.parameter_servers;
  return "{\"cluster\":{\"ps\":[" + ps + "],\"worker\":[" + workers + "]},\"task\":{\"type\":\"" +
         (server ? "ps" : "worker") + "\",\"index\":" + Str(index) + "}}";
}

// Reads env[key] as an int, naming the variable when it is missing or not a number.
Status EnvInt(const std::map<std::string, std::string>& env, const char* key, int* out) {
  auto it = env.find(key);
  if (it == env.end() || it->second.empty()) {
    return InvalidArgument(std::string(key) + " is not set: the learner contract is incomplete");
  }
  const std::string& v = it->second;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  if (ec != std::errc() || end != v.data() + v.size()) {
    return InvalidArgument(std::string(key) + "='" + v + "' is not an integer");
  }
  return Status::Ok();
}

std::string EnvStr(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? std::string() : it->second;
}

}  // namespace

Status MakeLearnerContract(const JobContract& job, const SlotFacts& slot, LearnerContract* out) {
  if (job.learners < 1 || job.slots_per_learner < 1) {
    return InvalidArgument("the job has " + Str(job.learners) + " learners of " +
                           Str(job.slots_per_learner) + " slots; both must be at least 1");
  }
  if (slot.learner_id < 1 || slot.learner_id > job.learners) {
    return InvalidArgument("learner id " + Str(slot.learner_id) + " is outside 1.." +
                           Str(job.learners));
  }
  if (slot.local_rank < 0 || slot.local_rank >= job.slots_per_learner) {
    return InvalidArgument("local rank " + Str(slot.local_rank) + " of learner-" +
                           Str(slot.learner_id) + " is outside 0.." +
                           Str(job.slots_per_learner - 1));
  }
  if (job.hosts.size() != static_cast<size_t>(job.learners)) {
    return InvalidArgument("the job has " + Str(job.learners) + " learners but " +
                           Str(static_cast<int>(job.hosts.size())) + " learner hosts");
  }
  LearnerContract c;
  c.job = job;
  c.learner_id = slot.learner_id;
  c.local_rank = slot.local_rank;
  // Parameter servers run their optimizer on CPUs: they see no GPU, even where the engine
  // allocated their node some (gpu_plan.h).
  const int gpus = job.is_server(slot.learner_id) ? 0 : job.gpus_per_learner;
  c.gpu_count = slot.node_gpus > 0 ? gpus : 0;
  // The learner's GPUs, slot k's own being device k (gpu_plan.h).
  c.visible_gpus = VisibleGpus(slot.node_gpus, gpus, slot.learner_on_node);
  if (c.visible_gpus && !slot.node_gpu_ids.empty() && !c.visible_gpus->empty()) {
    std::string mapped;
    size_t start = 0;
    const std::string& plan = *c.visible_gpus;
    while (start <= plan.size()) {
      size_t comma = std::min(plan.find(',', start), plan.size());
      size_t index = std::stoul(plan.substr(start, comma - start));
      if (index >= slot.node_gpu_ids.size()) {
        return InvalidArgument("learner-" + Str(slot.learner_id) + " needs GPU " +
                               Str(static_cast<int>(index)) +
                               " of its node, which was given only " +
                               Str(static_cast<int>(slot.node_gpu_ids.size())));
      }
      mapped += (mapped.empty() ? "" : ",") + slot.node_gpu_ids[index];
      start = comma + 1;
    }
    c.visible_gpus = mapped;
  }
  // Each slot gets an equal share of the cores, so N slots do not run N x cores threads.
  c.omp_threads = slot.node_cores > 0 ? std::max(1, slot.node_cores / job.slots_per_learner)
                                      : std::max(1, job.cores / std::max(1, job.total_slots()));
  *out = std::move(c);
  return Status::Ok();
}

std::map<std::string, std::string> ContractToEnv(const LearnerContract& c) {
  const JobContract& job = c.job;
  const int slots = job.slots_per_learner;
  const std::string rank = Str(c.rank());
  const std::string size = Str(c.size());
  const LearnerHost& me = c.me();
  const LearnerHost& first = job.hosts.front();
  const fs::path log_dir = job.job_dir / ("learner-" + Str(c.learner_id));

  std::map<std::string, std::string> env = {
      {"LEARNER_ID", Str(c.learner_id)},
      {"NUM_LEARNERS", Str(job.learners)},
      {"LEARNER_NAME_PREFIX", job.name_prefix},
      {"GPU_COUNT", Str(c.gpu_count)},
      {"TRAINING_ID", job.training_id},
      {"DATA_DIR", job.data_dir.string()},
      {"RESULT_DIR", job.job_dir.string()},
      {"LOG_DIR", log_dir.string()},
      {"CHECKPOINT_DIR", (job.job_dir / "checkpoints").string()},
      {"MODEL_DIR", job.model_dir.string()},
      {"JOB_STATE_DIR", (job.job_dir / "state").string()},
      {"CADRE_HOST", me.name},
      {"CADRE_LEARNER_ADDRESS", me.address},
      {"CADRE_RANK", rank},
      {"CADRE_SIZE", size},
      {"CADRE_LOCAL_RANK", Str(c.local_rank)},
      {"CADRE_LOCAL_SIZE", Str(slots)},
      {"CADRE_CROSS_RANK", Str(c.learner_id - 1)},
      {"CADRE_CROSS_SIZE", Str(job.learners)},
      {"CADRE_STORE", job.store_address},
      {"CADRE_JOB_TOKEN", job.job_token},
      {"CADRE_FRAMEWORK", job.framework},
      {"CADRE_MODE", job.mode},
      {"CADRE_RESTART_COUNT", Str(job.restart_count)},
      {"CADRE_MAX_RESTARTS", Str(job.max_restarts)},
      {"TORCHELASTIC_RESTART_COUNT", Str(job.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", Str(job.max_restarts)},
      {"HOROVOD_RANK", rank},
      {"HOROVOD_SIZE", size},
      {"HOROVOD_LOCAL_RANK", Str(c.local_rank)},
      {"HOROVOD_LOCAL_SIZE", Str(slots)},
      {"HOROVOD_CROSS_RANK", Str(c.learner_id - 1)},
      {"HOROVOD_CROSS_SIZE", Str(job.learners)},
      {"HOROVOD_HOSTNAME", me.name},
      {"RANK", rank},
      {"WORLD_SIZE", size},
      {"LOCAL_RANK", Str(c.local_rank)},
      {"LOCAL_WORLD_SIZE", Str(slots)},
      {"GROUP_RANK", Str(c.learner_id - 1)},
      // Plain programs get an address unless names resolve for them too.
      {"MASTER_ADDR", job.names_resolve ? first.name : first.address},
      {"MASTER_PORT", Str(kMasterPort)},
      {"OMP_NUM_THREADS", Str(c.omp_threads)},
  };
  if (!job.names_resolve) env["CADRE_HOSTS"] = job.hosts_file.string();
  if (!job.elastic_updates_file.empty()) {
    env["CADRE_ELASTIC_UPDATES"] = job.elastic_updates_file.string();
  }
  if (job.mode == "parameter-server") {
    env["PS_HOSTS_COUNT"] = Str(job.parameter_servers);
    env["CADRE_ROLE"] = job.is_server(c.learner_id) ? "ps" : "worker";
    env["TF_CONFIG"] = TfConfig(c);
  }
  if (c.visible_gpus) env["CUDA_VISIBLE_DEVICES"] = *c.visible_gpus;
  return env;
}

Status ReadContract(const std::map<std::string, std::string>& env, LearnerContract* out) {
  LearnerContract c;
  JobContract& job = c.job;
  int size = 0, rank = 0;
  CADRE_RETURN_IF_ERROR(EnvInt(env, "LEARNER_ID", &c.learner_id));
  CADRE_RETURN_IF_ERROR(EnvInt(env, "NUM_LEARNERS", &job.learners));
  CADRE_RETURN_IF_ERROR(EnvInt(env, "CADRE_LOCAL_RANK", &c.local_rank));
  CADRE_RETURN_IF_ERROR(EnvInt(env, "CADRE_LOCAL_SIZE", &job.slots_per_learner));
  CADRE_RETURN_IF_ERROR(EnvInt(env, "CADRE_RANK", &rank));
  CADRE_RETURN_IF_ERROR(EnvInt(env, "CADRE_SIZE", &size));
  CADRE_RETURN_IF_ERROR(EnvInt(env, "GPU_COUNT", &c.gpu_count));
  CADRE_RETURN_IF_ERROR(EnvInt(env, "OMP_NUM_THREADS", &c.omp_threads));
  if (c.learner_id < 1 || c.learner_id > job.learners) {
    return InvalidArgument("LEARNER_ID=" + Str(c.learner_id) +
                           " is outside 1..NUM_LEARNERS=" + Str(job.learners));
  }
  if (size != job.total_slots() || rank != c.rank()) {
    return InvalidArgument("CADRE_RANK=" + Str(rank) + "/CADRE_SIZE=" + Str(size) +
                           " disagree with LEARNER_ID, CADRE_LOCAL_RANK and CADRE_LOCAL_SIZE");
  }
  job.name_prefix = EnvStr(env, "LEARNER_NAME_PREFIX");
  job.training_id = EnvStr(env, "TRAINING_ID");
  job.framework = EnvStr(env, "CADRE_FRAMEWORK");
  job.mode = EnvStr(env, "CADRE_MODE");
  job.store_address = EnvStr(env, "CADRE_STORE");
  job.job_token = EnvStr(env, "CADRE_JOB_TOKEN");
  job.job_dir = EnvStr(env, "RESULT_DIR");
  job.data_dir = EnvStr(env, "DATA_DIR");
  job.model_dir = EnvStr(env, "MODEL_DIR");
  job.hosts_file = EnvStr(env, "CADRE_HOSTS");
  job.names_resolve = job.hosts_file.empty();
  job.elastic_updates_file = EnvStr(env, "CADRE_ELASTIC_UPDATES");
  // Absent outside a restartable runner: the first start, no restarts.
  for (auto [key, field] : {std::pair{"CADRE_RESTART_COUNT", &job.restart_count},
                            std::pair{"CADRE_MAX_RESTARTS", &job.max_restarts}}) {
    if (env.contains(key)) CADRE_RETURN_IF_ERROR(EnvInt(env, key, field));
  }
  if (job.mode == "parameter-server") {
    CADRE_RETURN_IF_ERROR(EnvInt(env, "PS_HOSTS_COUNT", &job.parameter_servers));
  }
  job.gpus_per_learner = c.gpu_count;
  // Only this learner's own name and address travel in the environment; the others' are in the
  // hosts file or DNS.
  job.hosts.resize(static_cast<size_t>(job.learners));
  for (int id = 1; id <= job.learners; ++id) {
    job.hosts[static_cast<size_t>(id - 1)] = {id, job.name_prefix + "-" + Str(id), ""};
  }
  job.hosts[static_cast<size_t>(c.learner_id - 1)] = {c.learner_id, EnvStr(env, "CADRE_HOST"),
                                                      EnvStr(env, "CADRE_LEARNER_ADDRESS")};
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) c.visible_gpus = it->second;
  *out = std::move(c);
  return Status::Ok();
}

std::string JobContractJson(const JobContract& job) {
  nlohmann::json hosts = nlohmann::json::array();
  for (const auto& h : job.hosts) {
    hosts.push_back({{"id", h.id}, {"name", h.name}, {"address", h.address}});
  }
  nlohmann::json j = {
      {"training_id", job.training_id},
      {"name_prefix", job.name_prefix},
      {"framework", job.framework},
      {"mode", job.mode},
      {"learners", job.learners},
      {"slots_per_learner", job.slots_per_learner},
      {"parameter_servers", job.parameter_servers},
      {"gpus_per_learner", job.gpus_per_learner},
      {"store_address", job.store_address},
      {"job_dir", job.job_dir.string()},
      {"data_dir", job.data_dir.string()},
      {"model_dir", job.model_dir.string()},
      {"hosts", hosts},
      {"names_resolve", job.names_resolve},
      {"hosts_file", job.hosts_file.string()},
      {"cores", job.cores},
      {"restart_count", job.restart_count},
      {"max_restarts", job.max_restarts},
      {"elastic_updates_file", job.elastic_updates_file.string()},
  };
  // The token is not in this file: it travels separately, readable by the job's owner only.
  return j.dump(2) + "\n";
}

Status ParseJobContractJson(const std::string& text, JobContract* out) {
  JobContract job;
  try {
    auto j = nlohmann::json::parse(text);
    job.training_id = j.at("training_id").get<std::string>();
    job.name_prefix = j.at("name_prefix").get<std::string>();
    job.framework = j.at("framework").get<std::string>();
    job.mode = j.at("mode").get<std::string>();
    job.learners = j.at("learners").get<int>();
    job.slots_per_learner = j.at("slots_per_learner").get<int>();
    job.parameter_servers = j.at("parameter_servers").get<int>();
    job.gpus_per_learner = j.at("gpus_per_learner").get<int>();
    job.store_address = j.at("store_address").get<std::string>();
    job.job_dir = j.at("job_dir").get<std::string>();
    job.data_dir = j.at("data_dir").get<std::string>();
    job.model_dir = j.at("model_dir").get<std::string>();
    for (const auto& h : j.at("hosts")) {
      job.hosts.push_back({h.at("id").get<int>(), h.at("name").get<std::string>(),
                           h.at("address").get<std::string>()});
    }
    job.names_resolve = j.at("names_resolve").get<bool>();
    job.hosts_file = j.at("hosts_file").get<std::string>();
    job.cores = j.at("cores").get<int>();
    job.restart_count = j.value("restart_count", 0);
    job.max_restarts = j.value("max_restarts", 0);
    job.elastic_updates_file = j.value("elastic_updates_file", std::string());
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("the job's contract file is malformed: ") + e.what());
  }
  *out = std::move(job);
  return Status::Ok();
}

std::vector<LearnerHost> NamedHosts(const std::string& prefix,
                                    const std::vector<std::string>& addresses) {
  std::vector<LearnerHost> hosts;
  for (size_t i = 0; i < addresses.size(); ++i) {
    int id = static_cast<int>(i) + 1;
    hosts.push_back({id, prefix + "-" + Str(id), addresses[i]});
  }
  return hosts;
}

}  // namespace cadre::launch
