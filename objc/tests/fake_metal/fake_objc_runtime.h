#pragma once
// The test double's object model (see fake_objc_runtime.cpp): every object starts with its class
// pointer (as Objective-C objects do) and a reference count; a class maps selector names to the
// C functions that implement them (self, selector, arguments...). Plain C++ only.
#include <atomic>
#include <cstddef>
#include <string>
#include <unordered_map>

extern "C" {
typedef void* id;
}

namespace fake_objc {

struct FakeClass {
  const char* name;
  std::unordered_map<std::string, void*> methods;
  void add(const char* selector, void* imp);
  void* lookup(const char* selector) const;
};

struct FakeObject {
  FakeClass* isa;
  std::atomic<long> refs;
  void (*destroy)(FakeObject*);  // frees what the object owns (not the object itself)
};

// A new object with reference count 1 (+1, as new/alloc/copy methods return).
FakeObject* new_object(FakeClass* cls, size_t bytes, void (*destroy)(FakeObject*));
// Puts the object in the innermost pool of this thread; counts it when there is none.
FakeObject* autorelease(FakeObject* object);

long live_objects();
long missing_pool_autoreleases();
long autoreleased_objects();
int pool_depth();

void* copy_block(const void* block);
void release_block(void* block);
void invoke_block_with_object(void* block, id argument);

}  // namespace fake_objc

extern "C" {
id objc_retain(id value);
void objc_release(id value);
}
