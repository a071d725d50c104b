#include <pybind11/pybind11.h>

#include "bindings.h"
#include "cadre/base/status.h"

namespace py = pybind11;

namespace cadre::python {

void BindBase(py::module_& m) {
  // One Python exception type per failure kind the caller can act on; all derive from CadreError.
  static py::exception<Error> cadre_error(m, "CadreError", PyExc_RuntimeError);
  static py::exception<Error> timeout_error(m, "CadreTimeoutError", cadre_error.ptr());
  static py::exception<Error> invalid_error(m, "CadreInvalidArgument", cadre_error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      switch (e.code()) {
        case Code::kTimeout: timeout_error(e.what()); break;
        case Code::kInvalidArgument: invalid_error(e.what()); break;
        default: cadre_error(e.what()); break;
      }
    }
  });
}

}  // namespace cadre::python

PYBIND11_MODULE(_core, m) {
  m.doc() = "cadre's C++ core";
  cadre::python::BindBase(m);
  cadre::python::BindComm(m);
  cadre::python::BindEngine(m);
  cadre::python::BindPs(m);
}
