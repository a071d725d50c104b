// A build without the parameter server (CADRE_WITH_PS=OFF): cadre.ps reads PS_BUILT and says so.
#include "bindings.h"

namespace cadre::python {

void BindPs(pybind11::module_& m) { m.attr("PS_BUILT") = pybind11::bool_(false); }

}  // namespace cadre::python
