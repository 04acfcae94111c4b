// A minimal Objective-C runtime for Linux, just enough to RUN objc/*.mm as compiled by clang for
// the macOS runtime ABI (-fobjc-runtime=macosx-13.0): objc_msgSend, the ARC entry points,
// autorelease pools and heap copies of blocks. Objects are FakeObject (isa first, then a reference
// count); classes map selector names to C functions. It keeps two ledgers the tests read:
// live objects (must return to zero after teardown, R6) and objects autoreleased while no pool
// was in place on that thread (must stay zero: that is what OBJC_DEBUG_MISSING_POOLS reports on a
// Mac, R5). It is a test double, not a general runtime: an unknown selector aborts loudly.
#include "fake_objc_runtime.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace fake_objc {

namespace {
std::atomic<long> g_live_objects{0};
std::atomic<long> g_missing_pool{0};
std::atomic<long> g_autoreleased{0};

struct PoolStack {
  std::vector<FakeObject*> objects;  // nullptr entries are pool boundaries
  int depth = 0;
};
thread_local PoolStack t_pools;
}  // namespace

void FakeClass::add(const char* selector, void* imp) { methods[selector] = imp; }

void* FakeClass::lookup(const char* selector) const {
  auto it = methods.find(selector);
  return it == methods.end() ? nullptr : it->second;
}

FakeObject* new_object(FakeClass* cls, size_t bytes, void (*destroy)(FakeObject*)) {
  void* memory = std::calloc(1, bytes);
  auto* object = static_cast<FakeObject*>(memory);
  object->isa = cls;
  object->refs.store(1);
  object->destroy = destroy;
  g_live_objects.fetch_add(1);
  return object;
}

FakeObject* autorelease(FakeObject* object) {
  if (object == nullptr) return nullptr;
  if (t_pools.depth == 0) {
    g_missing_pool.fetch_add(1);
    std::fprintf(stderr, "fake objc: MISSING POOLS: %s autoreleased with no pool in place\n",
                 object->isa->name);
    return object;  // leaks, as on a Mac
  }
  g_autoreleased.fetch_add(1);
  t_pools.objects.push_back(object);
  return object;
}

long live_objects() { return g_live_objects.load(); }
long missing_pool_autoreleases() { return g_missing_pool.load(); }
long autoreleased_objects() { return g_autoreleased.load(); }
int pool_depth() { return t_pools.depth; }

}  // namespace fake_objc

using fake_objc::FakeObject;

extern "C" {

// Called by the objc_msgSend trampoline: the function implementing `selector` for `receiver`.
void* fake_objc_lookup(FakeObject* receiver, const char* selector) {
  void* imp = receiver->isa->lookup(selector);
  if (imp == nullptr) {
    std::fprintf(stderr, "fake objc: unrecognized selector '%s' sent to %s\n", selector,
                 receiver->isa->name);
    std::abort();
  }
  return imp;
}

id objc_retain(id value) {
  if (value != nullptr) static_cast<FakeObject*>(value)->refs.fetch_add(1);
  return value;
}

void objc_release(id value) {
  if (value == nullptr) return;
  auto* object = static_cast<FakeObject*>(value);
  long before = object->refs.fetch_sub(1);
  if (before == 1) {
    if (object->destroy != nullptr) object->destroy(object);
    std::free(object);
    fake_objc::g_live_objects.fetch_sub(1);
  } else if (before <= 0) {
    std::fprintf(stderr, "fake objc: over-release of a %s\n", object->isa->name);
    std::abort();
  }
}

id objc_autorelease(id value) { return fake_objc::autorelease(static_cast<FakeObject*>(value)); }
id objc_autoreleaseReturnValue(id value) { return objc_autorelease(value); }
id objc_retainAutorelease(id value) { return objc_autorelease(objc_retain(value)); }
id objc_retainAutoreleaseReturnValue(id value) { return objc_autorelease(objc_retain(value)); }
id objc_retainAutoreleasedReturnValue(id value) { return objc_retain(value); }
id objc_unsafeClaimAutoreleasedReturnValue(id value) { return value; }
id objc_claimAutoreleasedReturnValue(id value) { return objc_retain(value); }

void objc_storeStrong(id* location, id value) {
  objc_retain(value);
  id old = *location;
  *location = value;
  objc_release(old);
}

void* objc_autoreleasePoolPush(void) {
  fake_objc::t_pools.objects.push_back(nullptr);
  fake_objc::t_pools.depth += 1;
  return reinterpret_cast<void*>(static_cast<uintptr_t>(fake_objc::t_pools.objects.size()));
}

void objc_autoreleasePoolPop(void* token) {
  auto& pools = fake_objc::t_pools;
  size_t keep = static_cast<size_t>(reinterpret_cast<uintptr_t>(token)) - 1;
  while (pools.objects.size() > keep) {
    FakeObject* object = pools.objects.back();
    pools.objects.pop_back();
    if (object == nullptr) {
      pools.depth -= 1;
    } else {
      objc_release(object);
    }
  }
}

id objc_alloc_init(id cls) {
  using Send0 = id (*)(id, const char*);
  auto alloc = reinterpret_cast<Send0>(fake_objc_lookup(static_cast<FakeObject*>(cls), "alloc"));
  id object = alloc(cls, "alloc");
  auto init = reinterpret_cast<Send0>(fake_objc_lookup(static_cast<FakeObject*>(object), "init"));
  return init(object, "init");
}

// objc_msgSend: look up the implementation without disturbing the argument registers or the
// stack, then jump to it (x86-64 System V). A nil receiver returns zero.
__asm__(
    ".text\n"
    ".globl objc_msgSend\n"
    ".type objc_msgSend, @function\n"
    "objc_msgSend:\n"
    "  testq %rdi, %rdi\n"
    "  jz 1f\n"
    "  pushq %rbp\n"
    "  movq %rsp, %rbp\n"
    "  subq $192, %rsp\n"
    "  movq %rdi, 0(%rsp)\n"
    "  movq %rsi, 8(%rsp)\n"
    "  movq %rdx, 16(%rsp)\n"
    "  movq %rcx, 24(%rsp)\n"
    "  movq %r8, 32(%rsp)\n"
    "  movq %r9, 40(%rsp)\n"
    "  movq %rax, 48(%rsp)\n"
    "  movdqu %xmm0, 64(%rsp)\n"
    "  movdqu %xmm1, 80(%rsp)\n"
    "  movdqu %xmm2, 96(%rsp)\n"
    "  movdqu %xmm3, 112(%rsp)\n"
    "  movdqu %xmm4, 128(%rsp)\n"
    "  movdqu %xmm5, 144(%rsp)\n"
    "  movdqu %xmm6, 160(%rsp)\n"
    "  movdqu %xmm7, 176(%rsp)\n"
    "  call fake_objc_lookup\n"
    "  movq %rax, %r11\n"
    "  movq 0(%rsp), %rdi\n"
    "  movq 8(%rsp), %rsi\n"
    "  movq 16(%rsp), %rdx\n"
    "  movq 24(%rsp), %rcx\n"
    "  movq 32(%rsp), %r8\n"
    "  movq 40(%rsp), %r9\n"
    "  movq 48(%rsp), %rax\n"
    "  movdqu 64(%rsp), %xmm0\n"
    "  movdqu 80(%rsp), %xmm1\n"
    "  movdqu 96(%rsp), %xmm2\n"
    "  movdqu 112(%rsp), %xmm3\n"
    "  movdqu 128(%rsp), %xmm4\n"
    "  movdqu 144(%rsp), %xmm5\n"
    "  movdqu 160(%rsp), %xmm6\n"
    "  movdqu 176(%rsp), %xmm7\n"
    "  movq %rbp, %rsp\n"
    "  popq %rbp\n"
    "  jmp *%r11\n"
    "1:\n"
    "  xorl %eax, %eax\n"
    "  xorl %edx, %edx\n"
    "  xorps %xmm0, %xmm0\n"
    "  xorps %xmm1, %xmm1\n"
    "  ret\n"
    ".size objc_msgSend, .-objc_msgSend\n");

// Block literals: only the stack-block class is referenced by compiled code; heap copies are made
// by fake_objc::copy_block for addCompletedHandler:.
void* _NSConcreteStackBlock[32];
void* _NSConcreteMallocBlock[32];
void* _NSConcreteGlobalBlock[32];

}  // extern "C"

namespace fake_objc {

namespace {
// The block ABI (clang's Block_literal / Block_descriptor).
constexpr int kBlockHasCopyDispose = 1 << 25;
struct BlockDescriptor {
  unsigned long reserved;
  unsigned long size;
  void (*copy)(void* dst, const void* src);
  void (*dispose)(const void*);
};
struct BlockLiteral {
  void* isa;
  int flags;
  int reserved;
  void* invoke;
  BlockDescriptor* descriptor;
};
}  // namespace

void* copy_block(const void* block) {
  auto* src = static_cast<const BlockLiteral*>(block);
  void* copy = std::malloc(src->descriptor->size);
  std::memcpy(copy, src, src->descriptor->size);
  auto* dst = static_cast<BlockLiteral*>(copy);
  dst->isa = _NSConcreteMallocBlock;
  if (src->flags & kBlockHasCopyDispose) src->descriptor->copy(copy, src);
  return copy;
}

void release_block(void* block) {
  auto* literal = static_cast<BlockLiteral*>(block);
  if (literal->flags & kBlockHasCopyDispose) literal->descriptor->dispose(block);
  std::free(block);
}

void invoke_block_with_object(void* block, id argument) {
  auto* literal = static_cast<BlockLiteral*>(block);
  reinterpret_cast<void (*)(void*, id)>(literal->invoke)(block, argument);
}

}  // namespace fake_objc
