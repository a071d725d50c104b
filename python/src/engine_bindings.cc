// The engine for Python (cadre.torch): tensors cross as (data pointer, shape, dtype) of
// contiguous CPU memory, so the extension does not link libtorch; the Python side keeps each
// tensor alive until its handle completes. Every call that can block releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>

#include "bindings.h"
#include "cadre/config/from_env.h"
#include "cadre/engine/engine.h"
#include "cadre/engine/group.h"

namespace py = pybind11;

namespace cadre::python {

namespace {

using engine::Engine;
using engine::Handle;
using engine::OpType;
using engine::Request;

// Raises the handle's stored error in Python (through the module's translator).
void Check(const Handle& h) {
  Status s = h.status();
  if (!s.ok()) throw Error(s);
}

// A submission's request from the codes Python passes; InvalidArgument for codes out of range.
Request MakeRequest(int op, const std::string& name, std::vector<int64_t> shape, int dtype,
                    int reduce_op) {
  if (op < 0 || op > static_cast<int>(OpType::kBarrier)) {
    throw Error(InvalidArgument("unknown operation " + std::to_string(op)));
  }
  if (dtype < 0 || dtype >= comm::kNumDataTypes) {
    throw Error(InvalidArgument("unknown dtype " + std::to_string(dtype)));
  }
  if (reduce_op < 0 || reduce_op >= comm::kNumReduceOps) {
    throw Error(InvalidArgument("unknown reduce op " + std::to_string(reduce_op)));
  }
  Request r;
  r.op = static_cast<OpType>(op);
  r.name = name;
  r.shape = std::move(shape);
  r.dtype = static_cast<comm::DataType>(dtype);
  r.reduce_op = static_cast<comm::ReduceOp>(reduce_op);
  return r;
}

// Engine::Enqueue, with a duplicate pending name raised as ValueError (Horovod's users catch it).
std::shared_ptr<Handle> Submit(Engine& e, Request r, uintptr_t ptr, bool batchable) {
  try {
    return e.Enqueue(std::move(r), reinterpret_cast<void*>(ptr), batchable);
  } catch (const Error& err) {
    if (err.code() == Code::kAlreadyExists) throw py::value_error(err.what());
    throw;
  }
}

// Waits for `h` with the GIL released, taking it back every 200 ms to let Ctrl-C through.
void WaitInterruptibly(const Handle& h) {
  while (true) {
    bool done;
    {
      py::gil_scoped_release release;
      done = h.Wait(Duration(200));
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

}  // namespace

void BindEngine(py::module_& m) {
  m.attr("COMM_BUILT") = py::bool_(true);
  // The codes Engine.enqueue takes, by the C++ enums' own names, so that Python never writes
  // them down again: OPS["allreduce"], DTYPES["bfloat16"] (torch's dtype names), REDUCE_OPS["max"].
  py::dict ops, dtypes, reduce_ops;
  for (int op = 0; op <= static_cast<int>(OpType::kJoin); ++op) {
    ops[py::str(std::string(engine::OpTypeName(static_cast<OpType>(op))))] = op;
  }
  for (int t = 0; t < comm::kNumDataTypes; ++t) {
    dtypes[py::str(std::string(comm::DataTypeName(static_cast<comm::DataType>(t))))] = t;
  }
  for (int op = 0; op < comm::kNumReduceOps; ++op) {
    reduce_ops[py::str(std::string(comm::ReduceOpName(static_cast<comm::ReduceOp>(op))))] = op;
  }
  m.attr("OPS") = ops;
  m.attr("DTYPES") = dtypes;
  m.attr("REDUCE_OPS") = reduce_ops;

  py::class_<Handle, std::shared_ptr<Handle>>(m, "Handle")
      .def("done", &Handle::done)
      .def(
          "wait",
          [](const Handle& h, double timeout_s) {
            return h.Wait(Duration(static_cast<int64_t>(timeout_s * 1000)));
          },
          py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>(),
          "Waits up to timeout_s; True when complete.")
      .def("check", &Check, "Raises the stored error, if any.")
      .def_property_readonly("output_shape", [](Handle& h) { return h.output_shape(); })
      .def_property_readonly("received_splits", [](Handle& h) { return h.received_splits(); })
      .def_property_readonly("output_nbytes", [](Handle& h) { return h.output().size(); })
      .def_property_readonly("join_rank", &Handle::join_rank)
      .def_property_readonly("external_sequence", &Handle::external_sequence)
      .def(
          "copy_output",
          [](Handle& h, uintptr_t ptr, size_t nbytes) {
            if (nbytes != h.output().size()) {
              throw Error(InvalidArgument("copy_output: destination has " + std::to_string(nbytes) +
                                          " bytes, output has " +
                                          std::to_string(h.output().size())));
            }
            if (nbytes) std::memcpy(reinterpret_cast<void*>(ptr), h.output().data(), nbytes);
          },
          py::arg("ptr"), py::arg("nbytes"));

  py::class_<Engine>(m, "Engine")
      .def(py::init([](const std::string& backend, int rank, int size, double timeout_s,
                       const std::string& prefix, bool env_timeline) {
             // The Python entry point's edge: the environment becomes values here
             // (config/from_env.h), and engine/ chooses and assembles the group from them.
             auto options = config::EngineOptionsFromEnv();
             // HOROVOD_TIMELINE names one file, written by the global set's rank 0; a process
             // set's engine has a rank 0 of its own that must not write (and clobber) it.
             if (!env_timeline) options.timeline_path.clear();
             const Duration timeout(static_cast<int64_t>(timeout_s * 1000));
             auto group = engine::CreateEngineGroup(
                 config::EngineGroupOptionsFromEnv(backend, rank, size, timeout, prefix));
             return std::make_unique<Engine>(std::move(group), std::move(options));
           }),
           py::arg("backend"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"),
           py::arg("prefix"), py::arg("env_timeline") = true,
           py::call_guard<py::gil_scoped_release>(),
           "Connects to the job's store (CADRE_STORE, CADRE_JOB_TOKEN) and starts the engine; "
           "env_timeline: whether CADRE_TIMELINE/HOROVOD_TIMELINE apply to it.")
      .def_property_readonly("rank", &Engine::rank)
      .def_property_readonly("size", &Engine::size)
      .def_property_readonly("fusion_threshold",
                             [](Engine& e) { return e.options().fusion_threshold_bytes; })
      .def_property_readonly("cycle_time_ms",
                             [](Engine& e) { return e.options().cycle_time.count() / 1000.0; })
      .def(
          "enqueue",
          [](Engine& e, int op, const std::string& name, uintptr_t ptr, std::vector<int64_t> shape,
             int dtype, int reduce_op, int root, std::vector<int64_t> splits, double prescale,
             double postscale, bool batchable, bool external,
             const std::optional<std::string>& group, uint32_t group_index, uint32_t group_size) {
            Request r = MakeRequest(op, name, std::move(shape), dtype, reduce_op);
            r.root = root;
            r.splits = std::move(splits);
            r.prescale = prescale;
            r.postscale = postscale;
            r.external = external;
            if (group) {
              if (group_size > 0 ? group_index >= group_size : group_index != 0) {
                throw Error(InvalidArgument("tensor " + std::to_string(group_index) + " of " +
                                            std::to_string(group_size) + " in group '" + *group +
                                            "'"));
              }
              r.grouped = true;
              r.group = *group;
              r.group_index = group_index;
              r.group_size = group_size;
            }
            return Submit(e, std::move(r), ptr, batchable);
          },
          py::arg("op"), py::arg("name"), py::arg("ptr"), py::arg("shape"), py::arg("dtype"),
          py::arg("reduce_op") = 0, py::arg("root") = 0, py::arg("splits") = std::vector<int64_t>{},
          py::arg("prescale") = 1.0, py::arg("postscale") = 1.0, py::arg("batchable") = false,
          py::arg("external") = false, py::arg("group") = std::nullopt, py::arg("group_index") = 0,
          py::arg("group_size") = 0,
          "external: negotiate only; the caller moves the data (Handle.external_sequence). "
          "group, group_index, group_size: a member of a grouped operation (group None: none; "
          "index 0 of 0: an empty group's marker).")
      .def(
          "allreduce_sync",
          [](Engine& e, const std::string& name, uintptr_t ptr, std::vector<int64_t> shape,
             int dtype, int reduce_op, double prescale, double postscale) {
            // The common synchronous case (allreduce_ of a contiguous tensor) in one call:
            // submit, wait, raise. A duplicate pending name raises ValueError (Submit), every
            // other error the module's CadreError, as enqueue and Handle.check do.
            Request r = MakeRequest(static_cast<int>(OpType::kAllreduce), name, std::move(shape),
                                    dtype, reduce_op);
            r.prescale = prescale;
            r.postscale = postscale;
            std::shared_ptr<Handle> h = Submit(e, std::move(r), ptr, /*batchable=*/false);
            WaitInterruptibly(*h);
            Check(*h);
          },
          py::arg("name"), py::arg("ptr"), py::arg("shape"), py::arg("dtype"), py::arg("reduce_op"),
          py::arg("prescale"), py::arg("postscale"))
      .def("join", &Engine::Join)
      .def("flush", &Engine::Flush, "Ends the batch wait for queued gradient submissions.")
      .def("shutdown", &Engine::Shutdown, py::call_guard<py::gil_scoped_release>())
      .def("start_timeline", &Engine::StartTimeline, py::arg("path"),
           py::arg("mark_cycles") = false)
      .def("stop_timeline", &Engine::StopTimeline)
      .def("stall_report", &Engine::StallReport);
}

}  // namespace cadre::python
