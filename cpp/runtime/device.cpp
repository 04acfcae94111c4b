// Device and the process-wide current device: see device.h.
#include "device.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "errors.h"
#include "recording.h"
#include "tensor.h"

namespace tl {

Device::Device(std::unique_ptr<Backend> backend, int threads)
    : backend_(std::move(backend)),
      backend_name_(backend_->name()),
      threads_(threads),
      pool_(*backend_, debug_),
      queue_(*backend_, debug_) {
  debug_.load_env();
}

std::shared_ptr<Device> Device::create(std::unique_ptr<Backend> backend, int threads) {
  return std::shared_ptr<Device>(new Device(std::move(backend), threads));
}

std::shared_ptr<Device> Device::create(const std::string& name, int threads) {
  std::unique_ptr<Backend> backend;
  if (name == "cpu") {
    backend = make_cpu_backend(threads);
  } else if (name == "cuda") {
#ifdef TL_HAVE_CUDA
    try {
      backend = make_cuda_backend();
    } catch (const std::exception& e) {
      throw BackendUnavailable(e.what());
    }
#else
    throw BackendUnavailable("cuda: this build of TensorLogic has no CUDA backend");
#endif
  } else if (name == "metal") {
#ifdef TL_HAVE_METAL
    try {
      backend = make_metal_backend();
    } catch (const std::exception& e) {
      throw BackendUnavailable(e.what());
    }
#else
    throw BackendUnavailable("metal: this build of TensorLogic has no Metal backend");
#endif
  } else {
    throw BackendUnavailable("unknown backend '" + name + "' (expected cpu, cuda or metal)");
  }
  return create(std::move(backend), threads);
}

Device::~Device() {
  try {
    queue_.synchronize();
  } catch (...) {
  }
  backend_->synchronize();
  pool_.teardown();
}

std::shared_ptr<Buffer> Device::allocate(const std::vector<int64_t>& shape, DType dtype,
                                         size_t bytes) {
  Block block = pool_.acquire(shape, dtype, bytes);
  Buffer* raw = nullptr;
  try {
    raw = new Buffer();
  } catch (...) {
    pool_.release(block);
    throw;
  }
  raw->block = block;
  raw->device = shared_from_this();
  std::shared_ptr<Buffer> buffer(raw, [](Buffer* b) {
    std::shared_ptr<Device> keep = std::move(b->device);
    keep->pool().release(b->block);
    delete b;
    // `keep` may be the last reference: the device is destroyed here, after the release.
  });
  if (recording_) recording_->own(buffer);
  return buffer;
}

void Device::abandon_recording(const std::string& reason) {
  if (recording_) recording_->abandon(reason);
}

namespace {

std::mutex g_device_mu;
// Deliberately never destroyed: at process exit the device is torn down by shutdown() (Python
// registers it with atexit), not by static destructors racing the interpreter's finalization.
std::shared_ptr<Device>* g_device = new std::shared_ptr<Device>();

}  // namespace

std::shared_ptr<Device> current_device() {
  std::lock_guard<std::mutex> lock(g_device_mu);
  if (!*g_device) {
    *g_device = Device::create(env_backend_name(), env_threads());
  }
  return *g_device;
}

bool has_current_device() {
  std::lock_guard<std::mutex> lock(g_device_mu);
  return static_cast<bool>(*g_device);
}

void init_device(const std::string& backend, int threads) {
  std::string name = backend.empty() ? env_backend_name() : backend;
  // A name that cannot work is the error to report, whatever else is alive.
  if (name != "cpu" && name != "cuda" && name != "metal")
    throw BackendUnavailable("unknown backend '" + name + "' (expected cpu, cuda or metal)");
  std::vector<std::string> built = available_backends();
  if (std::find(built.begin(), built.end(), name) == built.end())
    throw BackendUnavailable(name + ": this build of TensorLogic has no " +
                             (name == "cuda" ? std::string("CUDA") : std::string("Metal")) + " backend");
  std::shared_ptr<Device> old;
  {
    std::lock_guard<std::mutex> lock(g_device_mu);
    if (*g_device && (*g_device)->backend_name() == name &&
        (threads <= 0 || threads == (*g_device)->threads()))
      return;
    old = *g_device;
  }
  if (old) {
    old->drain();
    // Held here, by the global and by nothing else: no tensor of the old device is alive.
    if (old.use_count() > 2) {
      throw std::runtime_error("init: tensors of the current '" + old->backend_name() +
                               "' device are still alive; drop them before switching to '" +
                               name + "'");
    }
  }
  if (threads <= 0) threads = env_threads();
  std::shared_ptr<Device> fresh = Device::create(name, threads);
  std::lock_guard<std::mutex> lock(g_device_mu);
  if (*g_device) (*g_device)->mark_shut_down();
  *g_device = std::move(fresh);
}

void shutdown_device() {
  std::shared_ptr<Device> old;
  {
    std::lock_guard<std::mutex> lock(g_device_mu);
    old.swap(*g_device);
  }
  if (!old) return;
  old->mark_shut_down();
  old->clear_cache();  // drains the queue first; an unraised kernel error dies with the device
  old->pool().teardown();
}

std::vector<std::string> available_backends() {
  std::vector<std::string> out{"cpu"};
#ifdef TL_HAVE_CUDA
  out.push_back("cuda");
#endif
#ifdef TL_HAVE_METAL
  out.push_back("metal");
#endif
  return out;
}

int64_t live_tensor_count() { return LiveTensorToken::count(); }

}  // namespace tl
