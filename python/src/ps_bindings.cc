// Parameter servers for Python (cadre.ps). Tensors cross as (name, data pointer, element count)
// of contiguous float32 CPU memory, as in the engine bindings: the extension does not link
// libtorch, and the Python side keeps each tensor alive for the duration of the call. Every call
// that communicates or waits releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <optional>

#include "bindings.h"
#include "cadre/ps/client.h"
#include "cadre/ps/learner.h"
#include "cadre/ps/server.h"

namespace py = pybind11;

namespace cadre::python {
namespace {

using ps::Client;
using ps::Server;

Duration Seconds(double s, const char* what) {
  // At most ~3 years: larger values would overflow the clock arithmetic of the deadlines.
  if (!(s > 0) || s > 1e8)
    throw Error(InvalidArgument(std::string(what) + " must be a positive number of seconds"));
  return Duration(static_cast<int64_t>(s * 1000));
}

ps::OptimizerConfig OptimizerFromDict(const py::dict& d) {
  ps::OptimizerConfig c;
  for (auto item : d) {
    std::string key = py::cast<std::string>(item.first);
    py::handle v = item.second;
    if (key == "kind") {
      ThrowIfError(ps::ParseOptimizerKind(py::cast<std::string>(v), &c.kind));
    } else if (key == "lr") {
      c.lr = py::cast<float>(v);
    } else if (key == "momentum") {
      c.momentum = py::cast<float>(v);
    } else if (key == "dampening") {
      c.dampening = py::cast<float>(v);
    } else if (key == "nesterov") {
      c.nesterov = py::cast<bool>(v);
    } else if (key == "beta1") {
      c.beta1 = py::cast<float>(v);
    } else if (key == "beta2") {
      c.beta2 = py::cast<float>(v);
    } else if (key == "eps") {
      c.eps = py::cast<float>(v);
    } else if (key == "weight_decay") {
      c.weight_decay = py::cast<float>(v);
    } else {
      throw Error(InvalidArgument("optimizer: unknown hyper-parameter '" + key + "'"));
    }
  }
  return c;
}

using TensorTuple = std::tuple<std::string, uintptr_t, int64_t>;

// lrs: none, or one learning rate per tensor (pushes under an LR schedule). hypers: none, or
// per tensor None (the declared hyper-parameters) or a dict of them, as declare takes.
std::vector<ps::TensorView> Views(const std::vector<TensorTuple>& in,
                                  const std::optional<std::vector<float>>& lrs = std::nullopt,
                                  const std::optional<py::list>& hypers = std::nullopt) {
  if (lrs && lrs->size() != in.size())
    throw Error(InvalidArgument("lrs: " + std::to_string(lrs->size()) + " learning rates for " +
                                std::to_string(in.size()) + " tensors"));
  if (hypers && hypers->size() != in.size())
    throw Error(InvalidArgument("hypers: " + std::to_string(hypers->size()) +
                                " sets of hyper-parameters for " + std::to_string(in.size()) +
                                " tensors"));
  std::vector<ps::TensorView> out;
  for (const auto& [name, ptr, count] : in)
    out.push_back({name, reinterpret_cast<const float*>(ptr), count});
  if (lrs)
    for (size_t i = 0; i < out.size(); ++i) out[i].lr = (*lrs)[i];
  if (hypers) {
    // One conversion per distinct dict: the caller passes one per param group.
    std::map<PyObject*, ps::OptimizerConfig> seen;
    for (size_t i = 0; i < out.size(); ++i) {
      py::handle h = (*hypers)[i];
      if (h.is_none()) continue;
      auto it = seen.find(h.ptr());
      if (it == seen.end())
        it = seen.emplace(h.ptr(), OptimizerFromDict(py::cast<py::dict>(h))).first;
      out[i].hyper = it->second;
    }
  }
  return out;
}

// A variable's state vector from (pointer, count) of contiguous float32 memory; 0: none.
std::vector<float> StateVector(uintptr_t ptr, int64_t count) {
  if (ptr == 0) return {};
  const auto* f = reinterpret_cast<const float*>(ptr);
  return std::vector<float>(f, f + count);
}

py::object StateBytes(const std::vector<float>& v) {
  if (v.empty()) return py::none();
  return py::bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<ps::MutableTensorView> MutableViews(const std::vector<TensorTuple>& in) {
  std::vector<ps::MutableTensorView> out;
  for (const auto& [name, ptr, count] : in)
    out.push_back({name, reinterpret_cast<float*>(ptr), count});
  return out;
}

py::dict RoleDict() {
  ps::LearnerRole r;
  ThrowIfError(ps::RoleFromEnvironment(&r));
  py::dict d;
  d["role"] = r.is_server ? "ps" : "worker";
  d["learner_id"] = r.learner_id;
  d["num_learners"] = r.num_learners;
  d["num_servers"] = r.num_servers;
  d["num_workers"] = r.num_workers;
  d["worker_id"] = r.worker_id;
  d["listen_address"] = r.listen_address;
  d["server_addresses"] = r.server_addresses;
  d["token"] = r.token;
  return d;
}

}  // namespace

void BindPs(py::module_& m) {
  m.attr("PS_BUILT") = py::bool_(true);
  m.def("ps_role", &RoleDict,
        "This learner's parameter-server role from the learner contract (a dict)");

  py::class_<Server>(m, "PsServer")
      .def(py::init([](const std::string& address, int num_workers,
                       const std::optional<std::string>& token, double step_timeout_s,
                       double worker_timeout_s) {
             ps::ServerOptions o;
             o.address = address;
             o.num_workers = num_workers;
             o.token = RequiredToken(token, "PsServer");
             o.step_timeout = Seconds(step_timeout_s, "step_timeout");
             o.worker_timeout = Seconds(worker_timeout_s, "worker_timeout");
             std::unique_ptr<Server> s;
             ThrowIfError(Server::Start(o, &s));
             return s;
           }),
           py::arg("address"), py::arg("num_workers"), py::arg("token") = py::none(),
           py::arg("step_timeout") = 300.0,
           py::arg("worker_timeout") =
               std::chrono::duration<double>(ps::kDefaultWorkerTimeout).count())
      .def_property_readonly("port", &Server::port)
      .def(
          "wait",
          [](Server& s, std::optional<double> timeout_s) {
            Deadline deadline =
                timeout_s ? Deadline(Seconds(*timeout_s, "timeout")) : Deadline::Never();
            Status st = s.WaitAllDone(deadline);
            if (st.code() == Code::kTimeout) return false;
            ThrowIfError(st);
            return true;
          },
          py::arg("timeout") = py::none(), py::call_guard<py::gil_scoped_release>(),
          "Blocks until every worker said done (True) or the timeout passes (False); raises "
          "CadreError naming the workers silent for worker_timeout without saying done")
      .def("shutdown", &Server::Shutdown, py::call_guard<py::gil_scoped_release>());

  py::class_<Client>(m, "PsClient")
      .def(py::init([](const std::vector<std::string>& servers, int worker_id,
                       const std::optional<std::string>& token, int64_t partition_bytes,
                       int64_t message_bytes, int max_in_flight, double rpc_timeout_s,
                       double connect_timeout_s, double stall_timeout_s) {
             ps::ClientOptions o;
             o.servers = servers;
             o.worker_id = worker_id;
             o.token = RequiredToken(token, "PsClient");
             o.partition_bytes = partition_bytes;
             o.message_bytes = message_bytes;
             o.max_in_flight = max_in_flight;
             o.rpc_timeout = Seconds(rpc_timeout_s, "rpc_timeout");
             o.connect_timeout = Seconds(connect_timeout_s, "connect_timeout");
             o.stall_timeout = Seconds(stall_timeout_s, "stall_timeout");
             std::unique_ptr<Client> c;
             ThrowIfError(Client::Connect(o, &c));
             return c;
           }),
           py::arg("servers"), py::arg("worker_id"), py::arg("token") = py::none(),
           // Defaults are ClientOptions' (client.h), where the reasons are.
           py::arg("partition_bytes") = ps::ClientOptions{}.partition_bytes,
           py::arg("message_bytes") = ps::ClientOptions{}.message_bytes,
           py::arg("max_in_flight") = ps::ClientOptions{}.max_in_flight,
           py::arg("rpc_timeout") = 600.0, py::arg("connect_timeout") = 120.0,
           py::arg("stall_timeout") =
               std::chrono::duration<double>(ps::ClientOptions{}.stall_timeout).count())
      .def_property_readonly("worker_id", &Client::worker_id)
      .def(
          "declare",
          [](Client& c, const py::list& variables) {
            // (name, shape, data pointer, optimizer dict, sync)
            std::vector<ps::Variable> vars;
            for (py::handle h : variables) {
              auto t = py::cast<py::tuple>(h);
              if (t.size() != 5)
                throw Error(InvalidArgument(
                    "declare: each variable is (name, shape, data_ptr, optimizer, sync)"));
              ps::Variable v;
              v.name = py::cast<std::string>(t[0]);
              v.shape = py::cast<std::vector<int64_t>>(t[1]);
              v.initial = reinterpret_cast<const float*>(py::cast<uintptr_t>(t[2]));
              v.optimizer = OptimizerFromDict(py::cast<py::dict>(t[3]));
              v.sync = py::cast<bool>(t[4]);
              vars.push_back(std::move(v));
            }
            py::gil_scoped_release release;
            ThrowIfError(c.Declare(vars));
          },
          py::arg("variables"))
      .def(
          "push",
          [](Client& c, int64_t step, const std::vector<TensorTuple>& grads,
             const std::optional<std::vector<float>>& lrs, const std::optional<py::list>& hypers) {
            auto views = Views(grads, lrs, hypers);
            py::gil_scoped_release release;
            ThrowIfError(c.Push(step, views));
          },
          py::arg("step"), py::arg("grads"), py::arg("lrs") = py::none(),
          py::arg("hypers") = py::none())
      .def(
          "pull",
          [](Client& c, int64_t step, const std::vector<TensorTuple>& out) {
            auto views = MutableViews(out);
            py::gil_scoped_release release;
            ThrowIfError(c.Pull(step, views));
          },
          py::arg("step"), py::arg("out"))
      .def(
          "push_pull",
          [](Client& c, int64_t step, const std::vector<TensorTuple>& grads,
             const std::vector<TensorTuple>& out, const std::optional<std::vector<float>>& lrs,
             const std::optional<py::list>& hypers) {
            auto in = Views(grads, lrs, hypers);
            auto outs = MutableViews(out);
            py::gil_scoped_release release;
            ThrowIfError(c.PushPull(step, in, outs));
          },
          py::arg("step"), py::arg("grads"), py::arg("out"), py::arg("lrs") = py::none(),
          py::arg("hypers") = py::none())
      .def(
          "get_state",
          [](Client& c, int64_t step, const std::vector<std::string>& names) {
            std::vector<ps::OptimizerState> states;
            {
              py::gil_scoped_release release;
              ThrowIfError(c.GetOptimizerState(step, names, &states));
            }
            py::list out;
            for (const auto& st : states)
              out.append(py::make_tuple(st.steps, StateBytes(st.buf), StateBytes(st.sq)));
            return out;
          },
          py::arg("step"), py::arg("names"),
          "Per variable: (steps, buf, sq) of the servers' optimizer, buf and sq float32 bytes "
          "or None")
      .def(
          "set_state",
          [](Client& c,
             const std::vector<std::tuple<std::string, int64_t, uintptr_t, uintptr_t, int64_t>>&
                 entries) {
            // (name, steps, buf pointer or 0, sq pointer or 0, element count)
            std::vector<std::string> names;
            std::vector<ps::OptimizerState> states;
            for (const auto& [name, steps, buf, sq, count] : entries) {
              if (count < 0)
                throw Error(InvalidArgument("set_state: '" + name + "' has a negative count"));
              names.push_back(name);
              states.push_back({steps, StateVector(buf, count), StateVector(sq, count)});
            }
            py::gil_scoped_release release;
            ThrowIfError(c.SetOptimizerState(names, states));
          },
          py::arg("entries"))
      .def(
          "done", [](Client& c) { ThrowIfError(c.Done()); },
          py::call_guard<py::gil_scoped_release>())
      .def("partitions", [](const Client& c, const std::string& name) {
        std::vector<std::tuple<int, int64_t, int64_t, int>> out;
        for (const auto& p : c.shard_map().partitions(name))
          out.emplace_back(p.index, p.offset, p.count, p.server);
        return out;
      });
}

}  // namespace cadre::python
