#pragma once
// Debug and tuning switches of the runtime, read once from the environment when a device starts
// (TL_DEBUG_POISON, TL_DEBUG_DELAY_US, TL_NO_CACHE, TL_DEBUG_MEMORY, TL_OPS_PER_COMMAND_BUFFER,
// TL_CACHE_LIMIT_MB, TL_THREADS, TL_BACKEND) and changeable at run time through set_debug().
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "errors.h"

namespace tl {

struct DebugConfig {
  std::atomic<bool> poison{false};        // fill buffers with 0xFF (NaN) when they are recycled
  std::atomic<uint32_t> delay_us{0};      // random 0..delay_us sleep before each command
  std::atomic<bool> no_cache{false};      // free buffers at once instead of caching them
  std::atomic<bool> trace{false};         // one stderr line per allocation, reuse and free
  std::atomic<int> ops_per_command_buffer{64};

  void load_env();  // overwrite every field from the environment
};

// An integer environment variable in [lo, hi], `fallback` when unset or empty. Anything else (not
// a whole decimal number, out of range, overflowing) throws TLError with one line naming it, so
// that a typo never turns into a silently wrapped limit.
inline int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  std::string s(v);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.pop_back();
  size_t start = s.find_first_not_of(" \t");
  if (start == std::string::npos) return fallback;
  s = s.substr(start);
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(s.c_str(), &end, 10);
  bool whole = end != s.c_str() && *end == '\0';
  if (!whole || errno == ERANGE || x < lo || x > hi)
    throw TLError(std::string(name) + "=" + v + ": must be a whole number from " +
                  std::to_string(lo) + " to " + std::to_string(hi));
  return x;
}

inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  std::string s(v);
  return !(s == "0" || s == "false" || s == "False" || s == "no" || s == "off");
}

inline void DebugConfig::load_env() {
  DebugConfig& c = *this;
  c.poison = env_flag("TL_DEBUG_POISON");
  c.delay_us = static_cast<uint32_t>(env_int("TL_DEBUG_DELAY_US", 0, 0, 1000000));
  c.no_cache = env_flag("TL_NO_CACHE");
  c.trace = env_flag("TL_DEBUG_MEMORY");
  c.ops_per_command_buffer = static_cast<int>(env_int("TL_OPS_PER_COMMAND_BUFFER", 64, 1, 1000000));
}

}  // namespace tl
