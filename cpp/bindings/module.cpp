// The tensorlogic._core module: exception classes (all subclasses of TLRuntimeError, itself a
// RuntimeError) and the translation of C++ runtime errors into them.
#include "bindings.h"
#include "runtime/errors.h"
#include "runtime/recording.h"

namespace tl::py_bind {
namespace {

PyObject* make_exception(py::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string full = std::string("tensorlogic._core.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(full.c_str(), doc, base, nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::handle(cls));
  return cls;
}

}  // namespace
}  // namespace tl::py_bind

PYBIND11_MODULE(_core, m) {
  using namespace tl::py_bind;
  m.doc() = "TensorLogic's native runtime: device tensors, asynchronous ops, exact memory accounting.";

  static PyObject* base = make_exception(m, "TLRuntimeError", PyExc_RuntimeError,
                                         "Base class of every TensorLogic runtime error.");
  static PyObject* shape_error = make_exception(m, "ShapeError", base,
                                                "Shapes of an op's operands do not fit.");
  static PyObject* dtype_error = make_exception(m, "DTypeError", base,
                                                "An op does not support an operand's dtype.");
  static PyObject* oom_error = make_exception(m, "OutOfMemoryError", base,
                                              "The device could not allocate memory (the process keeps working).");
  static PyObject* kernel_failure = make_exception(m, "KernelFailure", base,
                                                   "A command buffer reported an error; raised at the next wait.");
  static PyObject* unavailable = make_exception(m, "BackendUnavailable", base,
                                                "The requested backend is not built or has no device.");

  static PyObject* replay_refused = make_exception(
      m, "ReplayRefused", base,
      "A compiled function's recording cannot be replayed (a tensor it uses was released, or it was abandoned).");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tl::ReplayRefused& e) {
      PyErr_SetString(replay_refused, e.what());
    } catch (const tl::ShapeError& e) {
      PyErr_SetString(shape_error, e.what());
    } catch (const tl::DTypeError& e) {
      PyErr_SetString(dtype_error, e.what());
    } catch (const tl::OutOfMemoryError& e) {
      PyErr_SetString(oom_error, e.what());
    } catch (const tl::KernelFailure& e) {
      PyErr_SetString(kernel_failure, e.what());
    } catch (const tl::KernelError& e) {
      PyErr_SetString(kernel_failure, e.what());
    } catch (const tl::BackendUnavailable& e) {
      PyErr_SetString(unavailable, e.what());
    } catch (const tl::TLError& e) {
      PyErr_SetString(base, e.what());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(oom_error, "out of host memory");
    }
  });

  bind_tensor(m);
  bind_ops(m);
  bind_memory(m);
  bind_recording(m);
  bind_logic(m);

  // Drain the queue and free device memory at interpreter exit (R6), before static destructors.
  py::module_::import("atexit").attr("register")(m.attr("shutdown"));
}
