// Runs the Metal kernels on the CPU, for tests on machines without a Mac (tests/runtime/
// test_metal_static.py). The shader unit (objc/embed_shaders.cmake's single-unit source, with
// `threadgroup` array declarations turned into function statics) is compiled as C++20 against the
// shim; tl_shim_dispatch then emulates dispatchThreadgroups: threadgroups run one after another,
// and the threads of one threadgroup run as fibers (ucontext) on the calling thread: each runs
// until it reaches threadgroup_barrier, and no fiber passes a barrier before every fiber of the
// group has reached it. A barrier that some threads of a group never reach (a divergent barrier,
// undefined behaviour in Metal) aborts with a message. Kernels without barriers run their threads
// one after another.
// What this proves: the kernels' arithmetic, indexing, block decoding and barrier placement are
// right under a faithful model of Metal's execution. What it cannot: Metal compiler acceptance,
// SIMD-group behaviour, real GPU memory ordering, performance.
#define TL_SHIM_EXECUTE 1
#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include TL_SHIM_UNIT

// The shim's address-space macros end with the shader unit.
#undef kernel
#undef device
#undef constant
#undef threadgroup
#undef thread

namespace {

struct Position {
  uint3 group;     // threadgroup_position_in_grid
  uint3 local;     // thread_position_in_threadgroup
  uint3 groups;    // threadgroups_per_grid
  uint3 threads;   // threads_per_threadgroup
  uint3 gid() const { return group * threads + local; }
  uint3 grid() const { return groups * threads; }
};

uint3 make3(uint32_t x, uint32_t y, uint32_t z) {
  uint3 v;
  v.x = x;
  v.y = y;
  v.z = z;
  return v;
}

uint2 xy(uint3 v) {
  uint2 r;
  r.x = v.x;
  r.y = v.y;
  return r;
}

// Fibers of the threadgroup being run (one threadgroup at a time, on one OS thread).
struct FiberGroup {
  ucontext_t scheduler;
  std::vector<ucontext_t> contexts;
  std::vector<int> state;  // 0 runnable, 1 waiting at the barrier, 2 finished
  const std::function<void(const Position&)>* body = nullptr;
  std::function<Position(uint32_t)> position_of;
  uint32_t current = 0;
};
thread_local FiberGroup* t_group = nullptr;
constexpr size_t kFiberStack = 128 * 1024;
// Fiber stacks, kept across dispatches (allocating 256 of them per dispatch would dominate).
thread_local std::vector<std::unique_ptr<char[]>> t_stacks;

void fiber_barrier() {
  FiberGroup& g = *t_group;
  g.state[g.current] = 1;
  swapcontext(&g.contexts[g.current], &g.scheduler);
}

void fiber_entry() {
  FiberGroup& g = *t_group;
  (*g.body)(g.position_of(g.current));
  g.state[g.current] = 2;
  // Returning resumes uc_link (the scheduler).
}

void run_group_as_fibers(FiberGroup& g, uint32_t count) {
  for (uint32_t t = 0; t < count; ++t) {
    getcontext(&g.contexts[t]);
    g.contexts[t].uc_stack.ss_sp = t_stacks[t].get();
    g.contexts[t].uc_stack.ss_size = kFiberStack;
    g.contexts[t].uc_link = &g.scheduler;
    makecontext(&g.contexts[t], fiber_entry, 0);
    g.state[t] = 0;
  }
  for (;;) {
    for (uint32_t t = 0; t < count; ++t) {
      if (g.state[t] != 0) continue;
      g.current = t;
      swapcontext(&g.scheduler, &g.contexts[t]);
    }
    uint32_t waiting = 0, finished = 0;
    for (uint32_t t = 0; t < count; ++t) {
      waiting += g.state[t] == 1;
      finished += g.state[t] == 2;
    }
    if (finished == count) return;
    if (finished > 0) {
      std::fprintf(stderr, "shim executor: divergent barrier: %u threads finished while %u wait "
                           "at a threadgroup_barrier\n", finished, waiting);
      std::abort();
    }
    for (uint32_t t = 0; t < count; ++t) g.state[t] = 0;  // everyone arrived: release the barrier
  }
}

void run_grid(uint3 groups, uint3 threads, bool uses_barriers,
              const std::function<void(const Position&)>& thread_body) {
  const uint32_t per_group = threads.x * threads.y * threads.z;
  FiberGroup fibers;
  if (uses_barriers) {
    fibers.contexts.resize(per_group);
    while (t_stacks.size() < per_group) t_stacks.emplace_back(new char[kFiberStack]);
    fibers.state.assign(per_group, 0);
    fibers.body = &thread_body;
  }
  for (uint32_t gz = 0; gz < groups.z; ++gz) {
    for (uint32_t gy = 0; gy < groups.y; ++gy) {
      for (uint32_t gx = 0; gx < groups.x; ++gx) {
        auto position_of = [=](uint32_t t) {
          Position p;
          p.group = make3(gx, gy, gz);
          p.local = make3(t % threads.x, (t / threads.x) % threads.y, t / (threads.x * threads.y));
          p.groups = groups;
          p.threads = threads;
          return p;
        };
        if (!uses_barriers) {
          for (uint32_t t = 0; t < per_group; ++t) thread_body(position_of(t));
          continue;
        }
        fibers.position_of = position_of;
        FiberGroup* outer = t_group;
        t_group = &fibers;
        metal::tl_shim_barrier_hook = &fiber_barrier;
        run_group_as_fibers(fibers, per_group);
        metal::tl_shim_barrier_hook = nullptr;
        t_group = outer;
      }
    }
  }
}

template <typename T>
T* buffer(void** buffers, int index) {
  return static_cast<T*>(buffers[index]);
}

}  // namespace

extern "C" size_t tl_shim_sizeof(const char* type) {
  std::string t(type);
  if (t == "TLViewDesc") return sizeof(TLViewDesc);
  if (t == "TLElementwiseParams") return sizeof(TLElementwiseParams);
  if (t == "TLCopyParams") return sizeof(TLCopyParams);
  if (t == "TLReduceParams") return sizeof(TLReduceParams);
  if (t == "TLMatmulParams") return sizeof(TLMatmulParams);
  if (t == "TLRowsParams") return sizeof(TLRowsParams);
  if (t == "TLExpertParams") return sizeof(TLExpertParams);
  if (t == "TLNormParams") return sizeof(TLNormParams);
  if (t == "TLAttentionParams") return sizeof(TLAttentionParams);
  if (t == "TLRopeParams") return sizeof(TLRopeParams);
  if (t == "TLDelayParams") return sizeof(TLDelayParams);
  if (t == "TLErrorRecord") return sizeof(TLErrorRecord);
  if (t == "TLFusedLinearParams") return sizeof(TLFusedLinearParams);
  if (t == "TLRopeKVParams") return sizeof(TLRopeKVParams);
  if (t == "TLOptimizerParams") return sizeof(TLOptimizerParams);
  return 0;
}

// 1 when `kernel` is one of the kernels below (the fake Metal's newFunctionWithName: asks).
extern "C" int tl_shim_has_kernel(const char* kernel) {
  static const char* const names[] = {
      "tl_binary", "tl_binary_scalar", "tl_where", "tl_unary", "tl_copy", "tl_fill", "tl_arange",
      "tl_reduce", "tl_softmax", "tl_reduce_columns", "tl_softmax_columns", "tl_matmul", "tl_linear", "tl_expert_linear", "tl_gather_rows", "tl_rms_norm",
      "tl_layer_norm", "tl_rope", "tl_causal_mask", "tl_attention", "tl_delay", "tl_fused_linear",
      "tl_swiglu", "tl_rope_kv_write", "tl_scatter_add_rows", "tl_optimizer_update"};
  for (const char* name : names) {
    if (std::strcmp(name, kernel) == 0) return 1;
  }
  return 0;
}

// buffers[i] is what the host binds at Metal buffer index i (index 0 is unused: params are
// passed separately, as setBytes does). Returns 0, or -1 for an unknown kernel name.
extern "C" int tl_shim_dispatch(const char* kernel, void* params, void** buffers,
                                const uint32_t* group_count, const uint32_t* thread_count) {
  const std::string name(kernel);
  const uint3 groups = make3(group_count[0], group_count[1], group_count[2]);
  const uint3 threads = make3(thread_count[0], thread_count[1], thread_count[2]);
  void** b = buffers;
  if (name == "tl_binary") {
    auto& p = *static_cast<TLElementwiseParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_binary(p, buffer<const uchar>(b, 1), buffer<const uchar>(b, 2), buffer<uchar>(b, 3),
                q.gid().x, q.grid().x);
    });
  } else if (name == "tl_binary_scalar") {
    auto& p = *static_cast<TLElementwiseParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_binary_scalar(p, buffer<const uchar>(b, 1), buffer<uchar>(b, 3), q.gid().x, q.grid().x);
    });
  } else if (name == "tl_where") {
    auto& p = *static_cast<TLElementwiseParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_where(p, buffer<const uchar>(b, 1), buffer<const uchar>(b, 2), buffer<uchar>(b, 3),
               buffer<const uchar>(b, 4), q.gid().x, q.grid().x);
    });
  } else if (name == "tl_unary") {
    auto& p = *static_cast<TLElementwiseParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_unary(p, buffer<const uchar>(b, 1), buffer<uchar>(b, 3), q.gid().x, q.grid().x);
    });
  } else if (name == "tl_copy") {
    auto& p = *static_cast<TLCopyParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_copy(p, buffer<const uchar>(b, 1), buffer<uchar>(b, 2), q.gid().x, q.grid().x);
    });
  } else if (name == "tl_fill") {
    auto& p = *static_cast<TLCopyParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_fill(p, buffer<uchar>(b, 2), q.gid().x, q.grid().x);
    });
  } else if (name == "tl_arange") {
    auto& p = *static_cast<TLCopyParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_arange(p, buffer<uchar>(b, 2), q.gid().x, q.grid().x);
    });
  } else if (name == "tl_reduce" || name == "tl_softmax") {
    auto& p = *static_cast<TLReduceParams*>(params);
    bool is_reduce = name == "tl_reduce";
    run_grid(groups, threads, true, [&](const Position& q) {
      if (is_reduce) {
        tl_reduce(p, buffer<const uchar>(b, 1), buffer<uchar>(b, 2), q.group.x, q.groups.x,
                  q.local.x);
      } else {
        tl_softmax(p, buffer<const uchar>(b, 1), buffer<uchar>(b, 2), q.group.x, q.groups.x,
                   q.local.x);
      }
    });
  } else if (name == "tl_reduce_columns" || name == "tl_softmax_columns") {
    auto& p = *static_cast<TLReduceParams*>(params);
    bool is_reduce = name == "tl_reduce_columns";
    run_grid(groups, threads, false, [&](const Position& q) {
      if (is_reduce) {
        tl_reduce_columns(p, buffer<const uchar>(b, 1), buffer<uchar>(b, 2), q.gid().x, q.grid().x);
      } else {
        tl_softmax_columns(p, buffer<const uchar>(b, 1), buffer<uchar>(b, 2), q.gid().x, q.grid().x);
      }
    });
  } else if (name == "tl_matmul") {
    auto& p = *static_cast<TLMatmulParams*>(params);
    run_grid(groups, threads, true, [&](const Position& q) {
      tl_matmul(p, buffer<const uchar>(b, 1), buffer<const uchar>(b, 2), buffer<uchar>(b, 3),
                q.group, q.local);
    });
  } else if (name == "tl_linear") {
    auto& p = *static_cast<TLRowsParams*>(params);
    run_grid(groups, threads, true, [&](const Position& q) {
      tl_linear(p, buffer<const float>(b, 1), buffer<const uchar>(b, 2), buffer<float>(b, 3),
                xy(q.group), xy(q.groups), xy(q.local));
    });
  } else if (name == "tl_expert_linear") {
    auto& p = *static_cast<TLExpertParams*>(params);
    run_grid(groups, threads, true, [&](const Position& q) {
      tl_expert_linear(p, buffer<const float>(b, 1), buffer<const uchar>(b, 2), buffer<const uchar>(b, 3),
                       buffer<float>(b, 4), buffer<TLErrorRecord>(b, 5), xy(q.group), xy(q.groups), xy(q.local));
    });
  } else if (name == "tl_gather_rows") {
    auto& p = *static_cast<TLRowsParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_gather_rows(p, buffer<const uchar>(b, 1), buffer<const uchar>(b, 2), buffer<uchar>(b, 3),
                     buffer<TLErrorRecord>(b, 4), xy(q.gid()), xy(q.grid()));
    });
  } else if (name == "tl_rms_norm") {
    auto& p = *static_cast<TLNormParams*>(params);
    run_grid(groups, threads, true, [&](const Position& q) {
      tl_rms_norm(p, buffer<const uchar>(b, 1), buffer<const uchar>(b, 2), buffer<uchar>(b, 3),
                  q.group.x, q.groups.x, q.local.x);
    });
  } else if (name == "tl_layer_norm") {
    auto& p = *static_cast<TLNormParams*>(params);
    run_grid(groups, threads, true, [&](const Position& q) {
      tl_layer_norm(p, buffer<const uchar>(b, 1), buffer<const uchar>(b, 2), buffer<uchar>(b, 3),
                    buffer<const uchar>(b, 4), q.group.x, q.groups.x, q.local.x);
    });
  } else if (name == "tl_rope") {
    auto& p = *static_cast<TLRopeParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_rope(p, buffer<const uchar>(b, 1), buffer<uchar>(b, 3), q.gid().x, q.grid().x);
    });
  } else if (name == "tl_causal_mask") {
    auto& p = *static_cast<TLAttentionParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_causal_mask(p, buffer<float>(b, 1), q.gid().x, q.grid().x);
    });
  } else if (name == "tl_attention") {
    auto& p = *static_cast<TLAttentionParams*>(params);
    run_grid(groups, threads, true, [&](const Position& q) {
      tl_attention(p, buffer<const uchar>(b, 1), buffer<const uchar>(b, 2),
                   buffer<const uchar>(b, 3), buffer<const uchar>(b, 4), buffer<float>(b, 5),
                   xy(q.group), xy(q.local));
    });
  } else if (name == "tl_fused_linear") {
    auto& p = *static_cast<TLFusedLinearParams*>(params);
    run_grid(groups, threads, true, [&](const Position& q) {
      tl_fused_linear(p, buffer<const float>(b, 1), buffer<const uchar>(b, 2), buffer<float>(b, 3),
                      buffer<const uchar>(b, 4), buffer<const uchar>(b, 5), buffer<float>(b, 6),
                      xy(q.group), xy(q.groups), xy(q.local));
    });
  } else if (name == "tl_swiglu") {
    auto& p = *static_cast<TLElementwiseParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_swiglu(p, buffer<const uchar>(b, 1), buffer<const uchar>(b, 2), buffer<float>(b, 3),
                q.gid().x, q.grid().x);
    });
  } else if (name == "tl_rope_kv_write") {
    auto& p = *static_cast<TLRopeKVParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_rope_kv_write(p, buffer<const uchar>(b, 1), buffer<const uchar>(b, 2), buffer<const uchar>(b, 3),
                       buffer<float>(b, 4), buffer<uchar>(b, 5), buffer<uchar>(b, 6), q.gid().x,
                       q.grid().x);
    });
  } else if (name == "tl_scatter_add_rows") {
    auto& p = *static_cast<TLRowsParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_scatter_add_rows(p, buffer<const uchar>(b, 1), buffer<const float>(b, 2), buffer<float>(b, 3),
                          buffer<TLErrorRecord>(b, 4), q.gid().x, q.grid().x);
    });
  } else if (name == "tl_optimizer_update") {
    auto& p = *static_cast<TLOptimizerParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_optimizer_update(p, buffer<float>(b, 1), buffer<const float>(b, 2), buffer<float>(b, 3),
                          buffer<float>(b, 4), q.gid().x, q.grid().x);
    });
  } else if (name == "tl_delay") {
    auto& p = *static_cast<TLDelayParams*>(params);
    run_grid(groups, threads, false, [&](const Position& q) {
      tl_delay(p, buffer<float>(b, 1), q.gid().x);
    });
  } else {
    return -1;
  }
  return 0;
}
