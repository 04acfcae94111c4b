// MetalDevice: device, queue, shader library, pipeline cache and live-buffer table.
// Invariants: (1) every Objective-C object this file creates is owned by exactly one strong
// member (or the caller's strong out-parameter) and is released here, never by an autorelease
// pool that outlives the call; (2) every function below that touches Objective-C does so inside
// @autoreleasepool, and no C++ exception is thrown from inside a pool: failures are carried out
// of the pool as a string and thrown after it (docs/runtime.md R5).
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <dispatch/dispatch.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "metal_device.h"
#include "metal_shader_library.h"

namespace tl {
namespace metal {

namespace {

std::string describe(NSError* error) {
  @autoreleasepool {
    if (error == nil) return std::string("unknown error");
    const char* text = [[error localizedDescription] UTF8String];
    std::string message = text != nullptr ? std::string(text) : std::string("unknown error");
    for (char& c : message) {
      if (c == '\n' || c == '\r') c = ' ';  // errors are one line
    }
    return message;
  }
}

// Loads the embedded metallib, or compiles the embedded source when there is no metallib or this
// macOS refuses it. Returns nil and sets *error on failure.
id<MTLLibrary> load_library(id<MTLDevice> device, std::string* error) {
  @autoreleasepool {
    NSError* ns_error = nil;
    if (kShaderMetallibSize > 0) {
      dispatch_data_t data = dispatch_data_create(kShaderMetallib, kShaderMetallibSize, nullptr,
                                                  DISPATCH_DATA_DESTRUCTOR_DEFAULT);
      id<MTLLibrary> library = [device newLibraryWithData:data error:&ns_error];
      if (library != nil) return library;
    }
    MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
    options.fastMathEnabled = NO;  // the CPU twins are the reference; keep IEEE semantics
    NSString* source = [NSString stringWithUTF8String:kShaderSource];
    ns_error = nil;
    id<MTLLibrary> library = [device newLibraryWithSource:source options:options error:&ns_error];
    if (library == nil) {
      *error = "metal: shader compilation failed: " + describe(ns_error);
    }
    return library;
  }
}

}  // namespace

MetalDevice::MetalDevice() {
  std::string error;
  @autoreleasepool {
    device_ = MTLCreateSystemDefaultDevice();
    if (device_ == nil) {
      error = "metal: no Metal device";
    } else {
      queue_ = [device_ newCommandQueue];
      if (queue_ == nil) error = "metal: could not create a command queue";
    }
    if (error.empty()) library_ = load_library(device_, &error);
    if (error.empty()) {
      placeholder_ = [device_ newBufferWithLength:64 options:MTLResourceStorageModeShared];
      if (placeholder_ == nil) {
        error = "metal: out of device memory at start-up";
      } else {
        std::memset([placeholder_ contents], 0, 64);
      }
    }
    if (!error.empty()) {
      placeholder_ = nil;
      library_ = nil;
      queue_ = nil;
      device_ = nil;
    }
  }
  if (!error.empty()) throw std::runtime_error(error);
}

MetalDevice::~MetalDevice() {
  @autoreleasepool {
    {
      std::lock_guard<std::mutex> lock(pipelines_mutex_);
      pipeline_refs_.clear();
      pipelines_.clear();
    }
    {
      std::lock_guard<std::mutex> lock(buffers_mutex_);
      live_buffers_.clear();
    }
    placeholder_ = nil;
    library_ = nil;
    queue_ = nil;
    device_ = nil;
  }
}

void* MetalDevice::allocate(size_t bytes) {
  @autoreleasepool {
    // A zero-length MTLBuffer cannot be made; a 1-byte one keeps pointers distinct.
    NSUInteger length = bytes > 0 ? bytes : 1;
    id<MTLBuffer> buffer = [device_ newBufferWithLength:length options:MTLResourceStorageModeShared];
    if (buffer == nil) return nullptr;
    void* contents = [buffer contents];
    std::lock_guard<std::mutex> lock(buffers_mutex_);
    live_buffers_[reinterpret_cast<uintptr_t>(contents)] = LiveBuffer{buffer, length};
    return contents;
  }
}

void MetalDevice::release(void* ptr) {
  @autoreleasepool {
    std::lock_guard<std::mutex> lock(buffers_mutex_);
    live_buffers_.erase(reinterpret_cast<uintptr_t>(ptr));  // drops the only strong reference
  }
}

bool MetalDevice::find_buffer(const void* ptr, BufferSlice* out) const {
  @autoreleasepool {
    uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(buffers_mutex_);
    auto it = live_buffers_.upper_bound(address);
    if (it == live_buffers_.begin()) return false;
    --it;
    if (address >= it->first + it->second.bytes) return false;
    out->buffer = it->second.buffer;
    out->offset = static_cast<size_t>(address - it->first);
    return true;
  }
}

bool MetalDevice::pipeline(const std::string& name, PipelineRef* out, std::string* error) {
  @autoreleasepool {
    std::lock_guard<std::mutex> lock(pipelines_mutex_);
    auto cached = pipeline_refs_.find(name);
    if (cached != pipeline_refs_.end()) {
      *out = cached->second;
      return true;
    }
    NSString* function_name = [NSString stringWithUTF8String:name.c_str()];
    id<MTLFunction> function = [library_ newFunctionWithName:function_name];
    if (function == nil) {
      *error = "metal: shader library has no kernel '" + name + "'";
      return false;
    }
    NSError* ns_error = nil;
    id<MTLComputePipelineState> state =
        [device_ newComputePipelineStateWithFunction:function error:&ns_error];
    if (state == nil) {
      *error = "metal: could not build pipeline '" + name + "': " + describe(ns_error);
      return false;
    }
    pipelines_[name] = state;
    PipelineRef ref;
    ref.state = state;
    ref.max_threads = static_cast<size_t>([state maxTotalThreadsPerThreadgroup]);
    pipeline_refs_[name] = ref;
    *out = ref;
    return true;
  }
}

bool MetalDevice::new_scratch_buffer(size_t bytes, __strong id<MTLBuffer>* out) {
  @autoreleasepool {
    id<MTLBuffer> buffer = [device_ newBufferWithLength:bytes options:MTLResourceStorageModeShared];
    if (buffer == nil) return false;
    std::memset([buffer contents], 0, bytes);
    *out = buffer;
    return true;
  }
}

MetalDevice::Handles MetalDevice::handles() const {
  @autoreleasepool {
    Handles h;
    h.queue = queue_;
    h.placeholder = placeholder_;
    return h;
  }
}

}  // namespace metal
}  // namespace tl
