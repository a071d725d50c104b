#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#include "cadre/base/byte_size.h"
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
        case Code::kTimeout:
          timeout_error(e.what());
          break;
        case Code::kInvalidArgument:
          invalid_error(e.what());
          break;
        default:
          cadre_error(e.what());
          break;
      }
    }
  });
  // The one parser of sizes written by people (base/byte_size.h), for Python's command lines.
  m.def(
      "parse_byte_size",
      [](const std::string& text) {
        uint64_t bytes = 0;
        ThrowIfError(ParseByteSize(text, &bytes));
        return bytes;
      },
      py::arg("text"),
      "Bytes of a size like 4096, 256K, 16M, 1G (binary units: K/KiB 1024, M/MiB 2^20, G/GiB "
      "2^30); CadreInvalidArgument otherwise.");
}

}  // namespace cadre::python

PYBIND11_MODULE(_core, m) {
  m.doc() = "cadre's C++ core";
  cadre::python::BindBase(m);
  cadre::python::BindComm(m);
  cadre::python::BindEngine(m);
  cadre::python::BindPs(m);
}
