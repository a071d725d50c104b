// Each layer's bindings register themselves on the module from their own file.
// Rules for every binding: release the GIL around anything that blocks or communicates
// (py::call_guard<py::gil_scoped_release>()), and let cadre::Error cross into Python only
// through the translator in module.cc.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

namespace cadre::python {

// The job token a binding was given: kInvalidArgument (raised in Python) when it is missing or
// empty. An empty token never means "no authentication" (comm_bindings.cc).
std::string RequiredToken(const std::optional<std::string>& token, const char* who);

void BindBase(pybind11::module_& m);
void BindComm(pybind11::module_& m);    // comm_bindings.cc
void BindEngine(pybind11::module_& m);  // engine_bindings.cc
void BindPs(pybind11::module_& m);      // ps_bindings.cc (ps_bindings_absent.cc without PS)

}  // namespace cadre::python
