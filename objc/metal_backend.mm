// MetalBackend: tl::Backend on one MTLDevice with one in-order MTLCommandQueue.
// Invariants: (1) submit encodes every command into one serial compute encoder of one command
// buffer, registers the completion handler before commit, and reports completion exactly once
// (from the handler, or at once when no command buffer could be made) (R3, R4); (2) a completion
// handler touches only what its block owns (a shared PendingCommandBuffer, the shared in-flight
// counter, the error-record buffer), never the backend, never throws, takes no Python lock;
// (3) every entry into Objective-C runs inside @autoreleasepool and no C++ exception crosses a
// pool boundary (R5); (4) teardown waits until every handler has reported, then releases all.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <cstring>

#include "backend.h"  // cpp/runtime/
#include "metal_device.h"
#include "metal_kernels.h"
#include "tl_params.h"  // shaders/

namespace tl {
namespace metal {

namespace {

// Command buffers submitted whose completion has not been reported yet. Shared by the backend
// and every completion handler, so a late handler never reaches into a destroyed backend.
struct InFlight {
  std::mutex mutex;
  std::condition_variable all_done;
  size_t count = 0;
};

// Everything one command buffer's completion needs; owned by the handler block.
struct PendingCommandBuffer {
  CompletionFn on_complete;
  std::string encode_error;  // first error thrown while encoding (later commands were skipped)
  std::shared_ptr<InFlight> in_flight;
};

std::string one_line(const char* text) {
  std::string message = text != nullptr ? std::string(text) : std::string("unknown error");
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return message;
}

// Calls on_complete once, then marks the command buffer as no longer in flight.
void report_completion(PendingCommandBuffer& pending, const std::string& error) noexcept {
  try {
    pending.on_complete(error);
  } catch (...) {
    // CompletionFn must not throw (backend.h); swallowing keeps the handler exception-free.
  }
  InFlight& in_flight = *pending.in_flight;
  {
    std::lock_guard<std::mutex> lock(in_flight.mutex);
    in_flight.count -= 1;
  }
  in_flight.all_done.notify_all();
}

// The completion handler's body: first error wins in execution order (a GPU fault, then a
// run-time data error recorded by a kernel, then the encode error that stopped encoding).
void finish_command_buffer(PendingCommandBuffer& pending, id<MTLCommandBuffer> done,
                           id<MTLBuffer> error_record) noexcept {
  std::string error;
  @autoreleasepool {
    try {
      if ([done status] == MTLCommandBufferStatusError) {
        NSError* ns_error = [done error];
        error = "metal: command buffer failed: " +
                one_line(ns_error != nil ? [[ns_error localizedDescription] UTF8String] : nullptr);
      } else if (error_record != nil) {
        TLErrorRecord record;
        std::memcpy(&record, [error_record contents], sizeof record);
        if (record.code == TL_ERROR_GATHER_ID_OUT_OF_RANGE) {
          // Same wording as the CPU twin (cpp/backends/cpu/kernels_matmul_quant.cpp).
          error = "embedding: id " + std::to_string(record.value) +
                  " is out of range for a table of " + std::to_string(record.limit) + " rows";
        } else if (record.code == TL_ERROR_EXPERT_ID_OUT_OF_RANGE) {
          error = "expert_linear: expert id " + std::to_string(record.value) + " is out of range for " +
                  std::to_string(record.limit) + " experts";
        } else if (record.code == TL_ERROR_SCATTER_ID_OUT_OF_RANGE) {
          error = "scatter_add_rows: id " + std::to_string(record.value) + " is out of range for [" +
                  std::to_string(record.limit) + ", D] rows";
        }
      }
      if (error.empty()) error = pending.encode_error;
    } catch (...) {
      error = "metal: out of memory while reporting a command buffer's completion";
    }
  }
  report_completion(pending, error);
}

class MetalBackend final : public Backend {
 public:
  MetalBackend()
      : device_(std::make_unique<MetalDevice>()),
        kernels_(std::make_unique<MetalKernels>(*device_)),
        in_flight_(std::make_shared<InFlight>()) {}

  ~MetalBackend() override {
    synchronize();
    kernels_.reset();
    device_.reset();  // releases pipelines, library, queue, buffers and the device (in a pool)
  }

  const char* name() const override { return "metal"; }
  bool memory_is_host_ram() const override { return false; }

  void* allocate(size_t bytes) override { return device_->allocate(bytes); }
  void deallocate(void* ptr, size_t /*bytes*/) override { device_->release(ptr); }

  // Buffers are in shared storage: the host sees the same memory, and the runtime has already
  // waited for every command buffer that uses the range (R2).
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void fill_bytes(void* dst, uint8_t value, size_t bytes) override {
    std::memset(dst, value, bytes);
  }

  void submit(std::vector<Command> commands, CompletionFn on_complete) override;

  void synchronize() override {
    std::unique_lock<std::mutex> lock(in_flight_->mutex);
    in_flight_->all_done.wait(lock, [this] { return in_flight_->count == 0; });
  }

  Kernels& kernels() override { return *kernels_; }

 private:
  std::unique_ptr<MetalDevice> device_;
  std::unique_ptr<MetalKernels> kernels_;
  std::shared_ptr<InFlight> in_flight_;
  std::mutex submit_mutex_;  // one command buffer is encoded at a time (kernels_ holds its state)
};

void MetalBackend::submit(std::vector<Command> commands, CompletionFn on_complete) {
  auto pending = std::make_shared<PendingCommandBuffer>();
  pending->on_complete = std::move(on_complete);
  pending->in_flight = in_flight_;
  {
    std::lock_guard<std::mutex> lock(in_flight_->mutex);
    in_flight_->count += 1;
  }
  std::lock_guard<std::mutex> submit_lock(submit_mutex_);
  bool committed = false;
  @autoreleasepool {
    id<MTLCommandBuffer> command_buffer = [device_->handles().queue commandBuffer];
    if (command_buffer == nil) {
      pending->encode_error = "metal: could not create a command buffer";
    } else {
      __strong id<MTLBuffer> error_record = nil;
      id<MTLComputeCommandEncoder> encoder =
          [command_buffer computeCommandEncoderWithDispatchType:MTLDispatchTypeSerial];
      if (encoder == nil) {
        pending->encode_error = "metal: could not create a compute command encoder";
      } else {
        kernels_->begin_command_buffer(encoder);
        try {
          for (Command& command : commands) command(*kernels_);
        } catch (const std::exception& e) {
          pending->encode_error = e.what();
        } catch (...) {
          pending->encode_error = "metal: unknown error while encoding a kernel";
        }
        kernels_->end_command_buffer(&error_record);
        [encoder endEncoding];
      }
      std::shared_ptr<PendingCommandBuffer> owned = pending;
      id<MTLBuffer> record = error_record;
      // Registered before commit, so the handler cannot miss the completion (R3).
      [command_buffer addCompletedHandler:^(id<MTLCommandBuffer> done) {
        @autoreleasepool {
          finish_command_buffer(*owned, done, record);
        }
      }];
      [command_buffer commit];
      committed = true;
    }
  }
  if (!committed) report_completion(*pending, pending->encode_error);
}

}  // namespace

}  // namespace metal

std::unique_ptr<Backend> make_metal_backend() {
  return std::make_unique<metal::MetalBackend>();
}

}  // namespace tl
