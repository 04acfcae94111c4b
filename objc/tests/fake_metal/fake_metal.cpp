// A fake Metal for Linux, on top of fake_objc_runtime.cpp: just the classes, selectors and C
// functions that objc/ uses (the same subset as objc/tests/sdk_stubs/Metal/Metal.h), with Metal's
// ownership conventions (new* methods and MTLCreateSystemDefaultDevice return +1; commandBuffer,
// computeCommandEncoder*, stringWithUTF8String:, localizedDescription return autoreleased
// objects). Buffers are host memory. A command queue runs committed command buffers in order on
// its own thread: each dispatch runs the real kernel from shaders/ through the shim executor
// (shaders/check/shim_executor.cpp), then the completed handlers are called on that thread,
// where no autorelease pool is in place (so a handler that forgets its pool is counted).
// FAKE_METAL_FAIL_COMMAND_BUFFER=N makes the N-th committed command buffer (1-based) fail with
// status Error and an NSError, without running its dispatches.
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fake_objc_runtime.h"

extern "C" int tl_shim_dispatch(const char* kernel, void* params, void** buffers,
                                const uint32_t* group_count, const uint32_t* thread_count);
extern "C" int tl_shim_has_kernel(const char* kernel);

using fake_objc::FakeClass;
using fake_objc::FakeObject;
using fake_objc::new_object;

namespace {

struct MTLSize {
  unsigned long width, height, depth;
};

template <typename T>
T* as(void* object) {
  return static_cast<T*>(object);
}

std::atomic<long> g_live_buffers{0};
std::atomic<long> g_committed{0};
std::atomic<long> g_dispatches{0};

// ---- NSString, NSError ------------------------------------------------------------------------

struct FakeString {
  FakeObject base;
  char* text;
};
FakeClass g_string_class{"NSString", {}};
FakeClass g_string_meta{"NSString(class)", {}};

FakeObject* make_string(const char* text) {
  auto* s = as<FakeString>(new_object(&g_string_class, sizeof(FakeString), [](FakeObject* o) {
    std::free(as<FakeString>(o)->text);
  }));
  s->text = strdup(text);
  return &s->base;
}

struct FakeError {
  FakeObject base;
  char* message;
};
FakeClass g_error_class{"NSError", {}};

FakeObject* make_error(const char* message) {
  auto* e = as<FakeError>(new_object(&g_error_class, sizeof(FakeError), [](FakeObject* o) {
    std::free(as<FakeError>(o)->message);
  }));
  e->message = strdup(message);
  return &e->base;
}

// ---- buffers, library, pipelines --------------------------------------------------------------

struct FakeBuffer {
  FakeObject base;
  void* data;
  unsigned long length;
};
FakeClass g_buffer_class{"MTLBuffer", {}};

struct FakeNamed {
  FakeObject base;
  char* name;
};
FakeClass g_library_class{"MTLLibrary", {}};
FakeClass g_function_class{"MTLFunction", {}};
FakeClass g_pipeline_class{"MTLComputePipelineState", {}};
FakeClass g_options_class{"MTLCompileOptions", {}};
FakeClass g_options_meta{"MTLCompileOptions(class)", {}};
FakeClass g_data_class{"dispatch_data", {}};

FakeObject* make_named(FakeClass* cls, const char* name) {
  auto* n = as<FakeNamed>(new_object(cls, sizeof(FakeNamed), [](FakeObject* o) {
    std::free(as<FakeNamed>(o)->name);
  }));
  n->name = strdup(name);
  return &n->base;
}

// ---- command buffers and the queue ------------------------------------------------------------

struct Dispatch {
  std::string kernel;
  std::vector<unsigned char> params;
  FakeObject* buffers[8] = {};  // retained until the command buffer completes
  unsigned long offsets[8] = {};
  uint32_t groups[3] = {1, 1, 1};
  uint32_t threads[3] = {1, 1, 1};
};

struct FakeQueue;

struct FakeCommandBuffer {
  FakeObject base;
  FakeQueue* queue;  // the queue outlives its command buffers (it drains before it dies)
  std::vector<Dispatch>* dispatches;
  std::vector<void*>* handlers;  // heap copies of the completed-handler blocks
  unsigned long status;          // MTLCommandBufferStatus
  FakeObject* error;
  std::mutex* mutex;
  std::condition_variable* done;
};
FakeClass g_command_buffer_class{"MTLCommandBuffer", {}};

struct FakeEncoder {
  FakeObject base;
  FakeCommandBuffer* command_buffer;  // retained
  Dispatch* pending;                  // state set before the next dispatch
  bool ended;
};
FakeClass g_encoder_class{"MTLComputeCommandEncoder", {}};

struct FakeQueue {
  FakeObject base;
  std::mutex* mutex;
  std::condition_variable* wake;
  std::deque<FakeCommandBuffer*>* pending;  // retained
  std::thread* worker;
  bool stopping;
};
FakeClass g_queue_class{"MTLCommandQueue", {}};

struct FakeDevice {
  FakeObject base;
};
FakeClass g_device_class{"MTLDevice", {}};

long fail_command_buffer_number() {
  const char* text = std::getenv("FAKE_METAL_FAIL_COMMAND_BUFFER");
  return text ? std::atol(text) : 0;
}

void run_command_buffer(FakeCommandBuffer* cb, long number) {
  if (number == fail_command_buffer_number()) {
    cb->status = 5;  // MTLCommandBufferStatusError
    cb->error = make_error("injected GPU fault (FAKE_METAL_FAIL_COMMAND_BUFFER)");
  } else {
    for (Dispatch& d : *cb->dispatches) {
      void* pointers[8] = {};
      for (int i = 0; i < 8; ++i) {
        if (d.buffers[i] != nullptr) {
          pointers[i] = static_cast<char*>(as<FakeBuffer>(d.buffers[i])->data) + d.offsets[i];
        }
      }
      if (tl_shim_dispatch(d.kernel.c_str(), d.params.data(), pointers, d.groups, d.threads) != 0) {
        std::fprintf(stderr, "fake metal: no kernel %s\n", d.kernel.c_str());
        std::abort();
      }
      g_dispatches.fetch_add(1);
    }
    cb->status = 4;  // MTLCommandBufferStatusCompleted
  }
  for (Dispatch& d : *cb->dispatches) {
    for (FakeObject*& b : d.buffers) {
      objc_release(b);
      b = nullptr;
    }
  }
  // Completed handlers run here, on the queue's thread, with no autorelease pool in place.
  for (void* block : *cb->handlers) {
    fake_objc::invoke_block_with_object(block, cb);
    fake_objc::release_block(block);
  }
  cb->handlers->clear();
  {
    std::lock_guard<std::mutex> lock(*cb->mutex);
    cb->done->notify_all();
  }
}

void queue_worker(FakeQueue* q) {
  long number = 0;
  for (;;) {
    FakeCommandBuffer* cb = nullptr;
    {
      std::unique_lock<std::mutex> lock(*q->mutex);
      q->wake->wait(lock, [q] { return q->stopping || !q->pending->empty(); });
      if (q->pending->empty()) return;
      cb = q->pending->front();
      q->pending->pop_front();
    }
    run_command_buffer(cb, ++number);
    objc_release(&cb->base);  // the reference commit took
  }
}

// ---- selector implementations -----------------------------------------------------------------

id string_with_utf8(id, const char*, const char* text) {
  return fake_objc::autorelease(make_string(text));
}
const char* string_utf8(id self, const char*) { return as<FakeString>(self)->text; }
id error_description(id self, const char*) {
  return fake_objc::autorelease(make_string(as<FakeError>(self)->message));
}

id options_alloc(id, const char*) {
  return new_object(&g_options_class, sizeof(FakeObject), nullptr);
}
id options_init(id self, const char*) { return self; }
void options_set_fast_math(id, const char*, bool) {}

void* buffer_contents(id self, const char*) { return as<FakeBuffer>(self)->data; }
unsigned long buffer_length(id self, const char*) { return as<FakeBuffer>(self)->length; }

id device_new_queue(id, const char*) {
  auto* q = as<FakeQueue>(new_object(&g_queue_class, sizeof(FakeQueue), [](FakeObject* o) {
    auto* queue = as<FakeQueue>(o);
    {
      std::lock_guard<std::mutex> lock(*queue->mutex);
      queue->stopping = true;
      queue->wake->notify_all();
    }
    queue->worker->join();
    delete queue->worker;
    delete queue->pending;
    delete queue->wake;
    delete queue->mutex;
  }));
  q->mutex = new std::mutex;
  q->wake = new std::condition_variable;
  q->pending = new std::deque<FakeCommandBuffer*>;
  q->stopping = false;
  q->worker = new std::thread(queue_worker, q);
  return q;
}

id device_new_buffer(id, const char*, unsigned long length, unsigned long /*options*/) {
  auto* b = as<FakeBuffer>(new_object(&g_buffer_class, sizeof(FakeBuffer), [](FakeObject* o) {
    std::free(as<FakeBuffer>(o)->data);
    g_live_buffers.fetch_sub(1);
  }));
  b->data = std::aligned_alloc(64, (length + 63) / 64 * 64);
  std::memset(b->data, 0, length);
  b->length = length;
  g_live_buffers.fetch_add(1);
  return b;
}

id device_new_library_source(id, const char*, id source, id /*options*/, id* error) {
  // The kernels themselves are compiled into this process through the shim; check that the
  // source handed to Metal is the embedded unit that defines them.
  const char* text = as<FakeString>(source)->text;
  if (std::strstr(text, "kernel void tl_binary(") == nullptr) {
    if (error) *error = fake_objc::autorelease(make_error("source lacks tl_binary"));
    return nullptr;
  }
  return make_named(&g_library_class, "tensorlogic");
}

id device_new_library_data(id, const char*, id /*data*/, id* error) {
  if (error) *error = fake_objc::autorelease(make_error("fake metal reads no metallib"));
  return nullptr;
}

id device_new_pipeline(id, const char*, id function, id* /*error*/) {
  return make_named(&g_pipeline_class, as<FakeNamed>(function)->name);
}

id device_name(id, const char*) { return fake_objc::autorelease(make_string("Fake Metal")); }

id library_new_function(id, const char*, id name) {
  const char* text = as<FakeString>(name)->text;
  if (!tl_shim_has_kernel(text)) return nullptr;
  return make_named(&g_function_class, text);
}

unsigned long pipeline_max_threads(id, const char*) { return 1024; }
unsigned long pipeline_execution_width(id, const char*) { return 32; }

id queue_command_buffer(id self, const char*) {
  auto* cb = as<FakeCommandBuffer>(
      new_object(&g_command_buffer_class, sizeof(FakeCommandBuffer), [](FakeObject* o) {
        auto* c = as<FakeCommandBuffer>(o);
        for (Dispatch& d : *c->dispatches) {
          for (FakeObject* b : d.buffers) objc_release(b);
        }
        for (void* block : *c->handlers) fake_objc::release_block(block);
        delete c->dispatches;
        delete c->handlers;
        delete c->mutex;
        delete c->done;
        objc_release(c->error);
      }));
  cb->queue = as<FakeQueue>(self);
  cb->dispatches = new std::vector<Dispatch>;
  cb->handlers = new std::vector<void*>;
  cb->status = 0;
  cb->error = nullptr;
  cb->mutex = new std::mutex;
  cb->done = new std::condition_variable;
  return fake_objc::autorelease(&cb->base);
}

id command_buffer_encoder(id self, const char*, unsigned long /*dispatch_type*/) {
  auto* e = as<FakeEncoder>(new_object(&g_encoder_class, sizeof(FakeEncoder), [](FakeObject* o) {
    auto* enc = as<FakeEncoder>(o);
    if (!enc->ended) {
      std::fprintf(stderr, "fake metal: encoder released without endEncoding\n");
      std::abort();
    }
    for (FakeObject* b : enc->pending->buffers) objc_release(b);
    delete enc->pending;
    objc_release(&enc->command_buffer->base);
  }));
  e->command_buffer = as<FakeCommandBuffer>(objc_retain(self));
  e->pending = new Dispatch;
  e->ended = false;
  return fake_objc::autorelease(&e->base);
}

id command_buffer_default_encoder(id self, const char* sel) {
  return command_buffer_encoder(self, sel, 0);
}

void command_buffer_add_handler(id self, const char*, void* block) {
  auto* cb = as<FakeCommandBuffer>(self);
  if (cb->status != 0) {
    std::fprintf(stderr, "fake metal: addCompletedHandler: after commit\n");
    std::abort();
  }
  cb->handlers->push_back(fake_objc::copy_block(block));
}

void command_buffer_commit(id self, const char*) {
  auto* cb = as<FakeCommandBuffer>(self);
  cb->status = 2;  // committed
  g_committed.fetch_add(1);
  objc_retain(self);  // held by the queue until it has run
  FakeQueue* q = cb->queue;
  std::lock_guard<std::mutex> lock(*q->mutex);
  q->pending->push_back(cb);
  q->wake->notify_all();
}

void command_buffer_wait(id self, const char*) {
  auto* cb = as<FakeCommandBuffer>(self);
  std::unique_lock<std::mutex> lock(*cb->mutex);
  cb->done->wait(lock, [cb] { return cb->status >= 4; });
}

unsigned long command_buffer_status(id self, const char*) { return as<FakeCommandBuffer>(self)->status; }
id command_buffer_error(id self, const char*) { return as<FakeCommandBuffer>(self)->error; }

void encoder_set_pipeline(id self, const char*, id pipeline) {
  as<FakeEncoder>(self)->pending->kernel = as<FakeNamed>(pipeline)->name;
}

void encoder_set_bytes(id self, const char*, const void* bytes, unsigned long length,
                       unsigned long index) {
  if (index != 0) {
    std::fprintf(stderr, "fake metal: setBytes at index %lu (objc/ passes params at 0)\n", index);
    std::abort();
  }
  auto* p = as<FakeEncoder>(self)->pending;
  p->params.assign(static_cast<const unsigned char*>(bytes),
                   static_cast<const unsigned char*>(bytes) + length);
}

void encoder_set_buffer(id self, const char*, id buffer, unsigned long offset, unsigned long index) {
  auto* p = as<FakeEncoder>(self)->pending;
  if (index >= 8 || buffer == nullptr) {
    std::fprintf(stderr, "fake metal: setBuffer with index %lu / nil buffer\n", index);
    std::abort();
  }
  if (offset >= as<FakeBuffer>(buffer)->length) {
    std::fprintf(stderr, "fake metal: setBuffer offset %lu beyond length %lu\n", offset,
                 as<FakeBuffer>(buffer)->length);
    std::abort();
  }
  objc_release(p->buffers[index]);
  p->buffers[index] = static_cast<FakeObject*>(objc_retain(buffer));
  p->offsets[index] = offset;
}

void encoder_dispatch(id self, const char*, MTLSize groups, MTLSize threads) {
  auto* e = as<FakeEncoder>(self);
  Dispatch d = *e->pending;  // bindings persist across dispatches, as in Metal
  for (FakeObject* b : d.buffers) objc_retain(b);
  d.groups[0] = static_cast<uint32_t>(groups.width);
  d.groups[1] = static_cast<uint32_t>(groups.height);
  d.groups[2] = static_cast<uint32_t>(groups.depth);
  d.threads[0] = static_cast<uint32_t>(threads.width);
  d.threads[1] = static_cast<uint32_t>(threads.height);
  d.threads[2] = static_cast<uint32_t>(threads.depth);
  if (threads.width * threads.height * threads.depth > 1024) {
    std::fprintf(stderr, "fake metal: %lu threads per threadgroup\n",
                 threads.width * threads.height * threads.depth);
    std::abort();
  }
  e->command_buffer->dispatches->push_back(std::move(d));
}

void encoder_end(id self, const char*) { as<FakeEncoder>(self)->ended = true; }

struct Registration {
  Registration() {
    g_string_meta.add("stringWithUTF8String:", reinterpret_cast<void*>(&string_with_utf8));
    g_string_class.add("UTF8String", reinterpret_cast<void*>(&string_utf8));
    g_error_class.add("localizedDescription", reinterpret_cast<void*>(&error_description));
    g_options_meta.add("alloc", reinterpret_cast<void*>(&options_alloc));
    g_options_class.add("init", reinterpret_cast<void*>(&options_init));
    g_options_class.add("setFastMathEnabled:", reinterpret_cast<void*>(&options_set_fast_math));
    g_buffer_class.add("contents", reinterpret_cast<void*>(&buffer_contents));
    g_buffer_class.add("length", reinterpret_cast<void*>(&buffer_length));
    g_device_class.add("newCommandQueue", reinterpret_cast<void*>(&device_new_queue));
    g_device_class.add("newBufferWithLength:options:", reinterpret_cast<void*>(&device_new_buffer));
    g_device_class.add("newLibraryWithSource:options:error:",
                       reinterpret_cast<void*>(&device_new_library_source));
    g_device_class.add("newLibraryWithData:error:", reinterpret_cast<void*>(&device_new_library_data));
    g_device_class.add("newComputePipelineStateWithFunction:error:",
                       reinterpret_cast<void*>(&device_new_pipeline));
    g_device_class.add("name", reinterpret_cast<void*>(&device_name));
    g_library_class.add("newFunctionWithName:", reinterpret_cast<void*>(&library_new_function));
    g_pipeline_class.add("maxTotalThreadsPerThreadgroup", reinterpret_cast<void*>(&pipeline_max_threads));
    g_pipeline_class.add("threadExecutionWidth", reinterpret_cast<void*>(&pipeline_execution_width));
    g_queue_class.add("commandBuffer", reinterpret_cast<void*>(&queue_command_buffer));
    g_command_buffer_class.add("computeCommandEncoderWithDispatchType:",
                               reinterpret_cast<void*>(&command_buffer_encoder));
    g_command_buffer_class.add("computeCommandEncoder",
                               reinterpret_cast<void*>(&command_buffer_default_encoder));
    g_command_buffer_class.add("addCompletedHandler:", reinterpret_cast<void*>(&command_buffer_add_handler));
    g_command_buffer_class.add("commit", reinterpret_cast<void*>(&command_buffer_commit));
    g_command_buffer_class.add("waitUntilCompleted", reinterpret_cast<void*>(&command_buffer_wait));
    g_command_buffer_class.add("status", reinterpret_cast<void*>(&command_buffer_status));
    g_command_buffer_class.add("error", reinterpret_cast<void*>(&command_buffer_error));
    g_encoder_class.add("setComputePipelineState:", reinterpret_cast<void*>(&encoder_set_pipeline));
    g_encoder_class.add("setBytes:length:atIndex:", reinterpret_cast<void*>(&encoder_set_bytes));
    g_encoder_class.add("setBuffer:offset:atIndex:", reinterpret_cast<void*>(&encoder_set_buffer));
    g_encoder_class.add("dispatchThreadgroups:threadsPerThreadgroup:",
                        reinterpret_cast<void*>(&encoder_dispatch));
    g_encoder_class.add("endEncoding", reinterpret_cast<void*>(&encoder_end));
  }
};
Registration g_registration;

}  // namespace

// Class objects referenced by compiled Objective-C code (macOS ABI symbol names).
FakeObject fake_nsstring_class_object __asm__("OBJC_CLASS_$_NSString") = {&g_string_meta, {1L << 40}, nullptr};
FakeObject fake_options_class_object __asm__("OBJC_CLASS_$_MTLCompileOptions") = {&g_options_meta, {1L << 40}, nullptr};

extern "C" {

id MTLCreateSystemDefaultDevice(void) {
  if (std::getenv("FAKE_METAL_NO_DEVICE") != nullptr) return nullptr;
  return new_object(&g_device_class, sizeof(FakeDevice), nullptr);
}

id dispatch_data_create(const void*, size_t, id, void*) {
  return new_object(&g_data_class, sizeof(FakeObject), nullptr);
}

long fake_metal_live_buffers() { return g_live_buffers.load(); }
long fake_metal_committed() { return g_committed.load(); }
long fake_metal_dispatches() { return g_dispatches.load(); }

}  // extern "C"
