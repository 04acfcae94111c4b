// tensorlogic._core.Recording: the native side of compiled TL functions (cpp/runtime/recording.h;
// the Python driver is python/tensorlogic/interp/compiled.py, its device side
// python/tensorlogic/builtins/recording.py). Rule: replay and finish release
// the GIL only around waits, never while touching Python objects.
#include "bindings.h"
#include "runtime/recording.h"

namespace tl::py_bind {

void bind_recording(py::module_& m) {
  py::class_<Recording, std::shared_ptr<Recording>>(m, "Recording", R"doc(
The commands of one call of a compiled function, replayed as one command buffer.
begin() makes it the device's current recording; every op then also appends to it. bind_input(t)
returns a private copy slot for a tensor argument; finish(outputs) ends recording and returns
copies of the outputs. replay(scalars, inputs) runs the commands again with new scalar inputs
(for the affine parameters of dynamic ops) and new input tensors, returning fresh outputs.
)doc")
      .def(py::init<int>(), py::arg("n_scalars"))
      .def("begin", &Recording::begin, "Become the current device's recording.")
      .def("bind_input", &Recording::bind_input, py::arg("tensor"),
           "A slot holding a copy of this tensor argument; the function body uses the slot.")
      .def("caller_view", &Recording::caller_view, py::arg("tensor"),
           "Before finish(): the tensor an uncompiled call would return for this result when it shares "
           "memory with the caller (a view of an argument, a tensor made outside), else None.")
      .def("finish", &Recording::finish, py::arg("outputs"), py::call_guard<py::gil_scoped_release>(),
           "End recording; returns fresh copies of the outputs (abandons if the recording cannot replay them).")
      .def("cancel", &Recording::cancel, "End recording after an error (the recording is abandoned).")
      .def("abandon", &Recording::abandon, py::arg("reason"),
           "Mark the recording as not replayable (the first reason is kept); the call goes on eagerly.")
      .def("cannot_replay", &Recording::cannot_replay,
           "Why a replay would be refused now ('' if it would run).")
      .def("add_scalar_input", &Recording::add_scalar_input,
           "A further scalar input after the call's own (a host-computed per-call value); returns its slot.")
      .def("pause", &Recording::pause, "Stop appending ops (they run eagerly; what they allocate is not owned).")
      .def("resume", &Recording::resume, "Append ops again after pause().")
      .def("replay", &Recording::replay, py::arg("scalars"), py::arg("inputs"),
           py::call_guard<py::gil_scoped_release>(),
           "Run the recording as one command buffer; returns fresh output tensors. Raises "
           "ReplayRefused if a tensor it uses was released, ShapeError on a signature mismatch or "
           "an out-of-range dynamic parameter.")
      .def_property_readonly("recording", &Recording::recording)
      .def_property_readonly("ready", &Recording::ready, "Finished and replayable.")
      .def_property_readonly("reason", &Recording::reason, "Why it was abandoned ('' if it was not).")
      .def_property_readonly("n_scalars", &Recording::n_scalars)
      .def_property_readonly("n_commands", &Recording::n_commands, "Recorded commands (ops).")
      .def_property_readonly("n_dynamic", &Recording::n_dynamic,
                             "Commands whose parameters are recomputed at each replay.")
      .def_property_readonly("owned_bytes", &Recording::owned_bytes,
                             "Device bytes the recording owns (intermediates, slots, constants).")
      .def_property_readonly("replays", &Recording::replays);
  m.def("recording_active", [] { return has_current_device() && current_device()->recording() != nullptr; },
        "True while a compiled function records on the current device.");
  m.def("abandon_recording", [](const std::string& reason) {
          if (has_current_device()) current_device()->abandon_recording(reason);
        }, py::arg("reason"), "Abandon the current recording, if any (the call goes on eagerly).");
}

}  // namespace tl::py_bind
