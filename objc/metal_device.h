#pragma once
// One Metal device for the process's Metal backend: the MTLDevice, its one in-order
// MTLCommandQueue, the shader library, the pipeline cache and the table of live MTLBuffers.
// Ownership: every Objective-C object is held by a strong member of this class (ARC) and by
// nothing else; callers get __unsafe_unretained references that stay valid until the object is
// removed here (a buffer: deallocate; pipelines and library: teardown). Every method that touches
// Objective-C runs inside @autoreleasepool and never lets a C++ exception leave the pool (an
// exception unwinding through @autoreleasepool skips the pool's pop) (docs/runtime.md R5).
// Include only from Objective-C++ (.mm) files.
#import <Metal/Metal.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tl {
namespace metal {

// A device pointer resolved to the MTLBuffer that contains it.
struct BufferSlice {
  __unsafe_unretained id<MTLBuffer> buffer = nil;
  size_t offset = 0;
};

// A cached compute pipeline and the threadgroup size limit the compiler gave it.
struct PipelineRef {
  __unsafe_unretained id<MTLComputePipelineState> state = nil;
  size_t max_threads = 0;
};

class MetalDevice {
 public:
  // Throws std::runtime_error("metal: no Metal device") when MTLCreateSystemDefaultDevice
  // returns nil, and a one-line reason when the queue or the shader library cannot be made.
  MetalDevice();
  // Waits for nothing (the backend drains the queue first) and releases every object it owns.
  ~MetalDevice();
  MetalDevice(const MetalDevice&) = delete;
  MetalDevice& operator=(const MetalDevice&) = delete;

  // Shared-storage buffer of at least `bytes` bytes; returns its contents pointer, or nullptr
  // when the device is out of memory.
  void* allocate(size_t bytes);
  // Releases the buffer whose contents pointer is `ptr` (a pointer not from allocate is ignored).
  void release(void* ptr);
  // Resolves a pointer anywhere inside a live buffer. Returns false when no buffer contains it.
  bool find_buffer(const void* ptr, BufferSlice* out) const;
  // The pipeline for kernel function `name`, built on first use and cached. On failure returns
  // false and sets *error to a one-line reason.
  bool pipeline(const std::string& name, PipelineRef* out, std::string* error);
  // Stores into *out a new shared buffer of `bytes` zeroed bytes owned by the caller (used for
  // per-command-buffer error records). Returns false when out of memory.
  bool new_scratch_buffer(size_t bytes, __strong id<MTLBuffer>* out);

  // The queue and the placeholder, valid for the device's lifetime. The placeholder is a 64-byte
  // buffer bound where a kernel's optional operand is absent, and the delay kernel's sink.
  struct Handles {
    __unsafe_unretained id<MTLCommandQueue> queue = nil;
    __unsafe_unretained id<MTLBuffer> placeholder = nil;
  };
  Handles handles() const;

 private:
  id<MTLDevice> device_ = nil;
  id<MTLCommandQueue> queue_ = nil;
  id<MTLLibrary> library_ = nil;
  id<MTLBuffer> placeholder_ = nil;

  mutable std::mutex buffers_mutex_;
  struct LiveBuffer {
    id<MTLBuffer> buffer;
    size_t bytes;
  };
  std::map<uintptr_t, LiveBuffer> live_buffers_;  // keyed by contents address

  std::mutex pipelines_mutex_;
  std::unordered_map<std::string, PipelineRef> pipeline_refs_;
  std::unordered_map<std::string, id<MTLComputePipelineState>> pipelines_;
};

}  // namespace metal
}  // namespace tl
