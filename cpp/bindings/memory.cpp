// Device selection, debug switches and the memory ledger of tensorlogic._core.
#include "bindings.h"
#include "runtime/errors.h"

namespace tl::py_bind {

namespace {

py::dict memory_stats_dict(bool sync) {
  std::shared_ptr<Device> dev = current_device();
  MemoryStats s;
  QueueStats q;
  {
    py::gil_scoped_release nogil;
    if (sync) dev->drain();
    s = dev->pool().stats();
    q = dev->queue().stats();
  }
  py::dict d;
  d["live_bytes"] = s.live_bytes;
  d["peak_bytes"] = s.peak_bytes;
  d["cached_bytes"] = s.cached_bytes;
  d["reserved_bytes"] = s.reserved_bytes;
  d["device_bytes"] = s.device_bytes;
  d["allocations"] = s.allocations;
  d["frees"] = s.frees;
  d["pool_hits"] = s.pool_hits;
  d["pool_misses"] = s.pool_misses;
  d["reservation_hits"] = s.reservation_hits;
  d["reservation_misses"] = s.reservation_misses;
  d["evictions"] = s.evictions;
  d["command_buffers_committed"] = q.committed;
  d["command_buffers_in_flight"] = q.in_flight;
  d["completed_seq"] = q.completed_seq;
  d["ops_encoded"] = q.ops_encoded;
  d["live_tensors"] = live_tensor_count();
  d["cache_limit_bytes"] = s.cache_limit_bytes;
  return d;
}

}  // namespace

void bind_memory(py::module_& m) {
  m.def("init", [](std::optional<std::string> backend, int threads) {
          py::gil_scoped_release nogil;
          init_device(backend ? *backend : std::string(), threads);
        }, py::arg("backend") = py::none(), py::arg("threads") = 0,
        "Select the backend ('cpu', 'cuda', 'metal'; default TL_BACKEND or 'cpu'). Switching "
        "requires that no tensor of the old device is alive.");
  m.def("backend_name", [] { return current_device()->backend_name(); }, "Name of the current backend.");
  m.def("threads", [] { return current_device()->threads(); },
        "Kernel threads of the current device (the CPU backend's pool; init(threads=N) or TL_THREADS).");
  m.def("available_backends", &available_backends, "Backends built into this module.");
  m.def("set_debug", [](std::optional<bool> poison, std::optional<int64_t> delay_us,
                        std::optional<bool> no_cache, std::optional<bool> trace) {
          std::shared_ptr<Device> dev = current_device();
          DebugConfig& c = dev->debug();
          if (poison) c.poison = *poison;
          if (delay_us) {
            if (*delay_us < 0 || *delay_us > 1000000)
              throw py::value_error("set_debug: delay_us must be in 0..1000000");
            c.delay_us = static_cast<uint32_t>(*delay_us);
          }
          if (no_cache) {
            c.no_cache = *no_cache;
            if (*no_cache) {
              py::gil_scoped_release nogil;
              dev->clear_cache();
            }
          }
          if (trace) c.trace = *trace;
        }, py::arg("poison") = py::none(), py::arg("delay_us") = py::none(),
        py::arg("no_cache") = py::none(), py::arg("trace") = py::none(),
        "Change debug switches (None leaves one as it is): poison recycled buffers with 0xFF "
        "(NaN), random delay before each kernel, no caching, allocation trace to stderr.");
  m.def("get_debug", [] {
          DebugConfig& c = current_device()->debug();
          py::dict d;
          d["poison"] = c.poison.load();
          d["delay_us"] = c.delay_us.load();
          d["no_cache"] = c.no_cache.load();
          d["trace"] = c.trace.load();
          d["ops_per_command_buffer"] = c.ops_per_command_buffer.load();
          d["q8_activations"] = c.q8_activations.load();
          d["q8_rows"] = c.q8_rows.load();
          return d;
        }, "The current debug switches as a dict.");
  m.def("set_ops_per_command_buffer", [](int n) {
          if (n < 1) throw py::value_error("set_ops_per_command_buffer: n must be >= 1");
          current_device()->debug().ops_per_command_buffer = n;
        }, py::arg("n"), "Commit the open command buffer after every n ops (default 64).");
  m.def("set_q8_activations", [](bool on, int rows) {
          if (rows < 0)
            throw py::value_error("set_q8_activations: rows must be 0 (every product) or a row count >= 1, got " +
                                  std::to_string(rows));
          current_device()->debug().q8_activations = on;
          current_device()->debug().q8_rows = rows;
        }, py::arg("on"), py::arg("rows") = 1,
        "Quantize the activations of linear ops with block-quantized weights to 8 bits, as llama.cpp "
        "does: faster, approximate results; each row's result is bitwise that row's alone. `rows`: the "
        "products it covers, those of at most `rows` rows of x (1: matrix-vector products, decode only; "
        "a count: a batched decode step's rows) or, with 0, every product, prompt pieces included "
        "(`tl generate --fast`, `tl serve --fast`). Applies to ops encoded from now on; the CPU backend "
        "has the integer path for Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K weights (others, longer "
        "products than `rows` and other backends stay exact). Default off (TL_Q8_ACTIVATIONS=1: on, "
        "matrix-vector products).");
  m.def("q8_activations", [] { return current_device()->debug().q8_activations.load(); },
        "Whether linear ops quantize their activations to 8 bits (set_q8_activations).");
  m.def("synchronize", [] {
          std::shared_ptr<Device> dev = current_device();
          py::gil_scoped_release nogil;
          dev->synchronize();
        }, "Commit and wait for all queued work (never needed for correctness); raises KernelFailure "
           "if a command buffer failed.");
  m.def("shutdown", [] {
          py::gil_scoped_release nogil;
          shutdown_device();
        }, "Drain the queue and free the pool; live tensors keep their memory until dropped.");
  m.def("memory_stats", &memory_stats_dict, py::arg("sync") = true,
        "The memory ledger as a dict (live/peak/cached/reserved bytes, allocations, frees, pool "
        "and reservation hits/misses, evictions, command buffers, live tensors). With sync=True "
        "(default) queued work is finished first, so the numbers are exact.");
  m.def("reset_peak_memory", [] {
          std::shared_ptr<Device> dev = current_device();
          py::gil_scoped_release nogil;
          dev->drain();
          dev->pool().reset_peak();
        }, "Set peak_bytes to the current live_bytes.");
  m.def("clear_cache", [] {
          std::shared_ptr<Device> dev = current_device();
          py::gil_scoped_release nogil;
          dev->clear_cache();
        }, "Wait for the queue, then free every cached (unused) buffer.");
  m.def("set_cache_limit", [](int64_t bytes) { current_device()->pool().set_cache_limit(bytes); },
        py::arg("bytes"), "Maximum bytes the pool keeps cached (least recently used evicted first).");
  m.def("buffer_reserve", [](py::handle shape, int64_t count, py::handle dtype, bool learnable) {
          Shape s = parse_shape(shape, "buffer_reserve");
          DType t = parse_dtype(dtype, "buffer_reserve");
          std::shared_ptr<Device> dev = current_device();
          py::gil_scoped_release nogil;
          dev->pool().reserve(s, t, count, learnable);
        }, py::arg("shape"), py::arg("count"), py::arg("dtype") = "f32", py::arg("learnable") = false,
        "Preallocate `count` buffers for tensors of exactly (shape, dtype); such tensors take them "
        "first and give them back when released. When all are taken, allocation falls back to the "
        "pool and counts a miss.");
  m.def("buffer_stats", [] {
          std::shared_ptr<Device> dev = current_device();
          dev->pool().collect();
          py::list out;
          for (const Reservation& r : dev->pool().reservations()) {
            py::dict d;
            d["shape"] = py::tuple(py::cast(r.shape));
            d["dtype"] = std::string(dtype_name(r.dtype));
            d["reserved"] = static_cast<int64_t>(r.blocks.size());
            d["taken"] = static_cast<int64_t>(r.blocks.size() - r.free.size());
            d["hits"] = r.hits;
            d["misses"] = r.misses;
            int64_t total = r.hits + r.misses;
            d["hit_rate"] = total ? static_cast<double>(r.hits) / static_cast<double>(total) : 0.0;
            d["learnable"] = r.learnable;
            d["bytes_each"] = static_cast<int64_t>(r.bytes_each);
            out.append(d);
          }
          return out;
        }, "Per reserved (shape, dtype): reserved, taken, hits, misses, hit_rate, learnable.");
}

}  // namespace tl::py_bind
