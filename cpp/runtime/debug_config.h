#pragma once
// Debug and tuning switches of the runtime, read once from the environment when a device starts
// (TL_DEBUG_POISON, TL_DEBUG_DELAY_US, TL_NO_CACHE, TL_DEBUG_MEMORY, TL_OPS_PER_COMMAND_BUFFER,
// TL_CACHE_LIMIT_MB, TL_THREADS, TL_BACKEND, TL_Q8_ACTIVATIONS) and changeable at run time through
// set_debug() / set_q8_activations().
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace tl {

struct DebugConfig {
  std::atomic<bool> poison{false};        // fill buffers with 0xFF (NaN) when they are recycled
  std::atomic<uint32_t> delay_us{0};      // random 0..delay_us sleep before each command
  std::atomic<bool> no_cache{false};      // free buffers at once instead of caching them
  std::atomic<bool> trace{false};         // one stderr line per allocation, reuse and free
  std::atomic<int> ops_per_command_buffer{64};
  // linear ops encoded while this is on quantize their activations to 8 bits (approximate, faster)
  std::atomic<bool> q8_activations{false};

  void load_env();  // overwrite every field from the environment
};

inline int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (end == v) return fallback;
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
  int64_t d = env_int("TL_DEBUG_DELAY_US", 0);
  c.delay_us = static_cast<uint32_t>(d < 0 ? 0 : (d > 1000000 ? 1000000 : d));
  c.no_cache = env_flag("TL_NO_CACHE");
  c.trace = env_flag("TL_DEBUG_MEMORY");
  int64_t n = env_int("TL_OPS_PER_COMMAND_BUFFER", 64);
  c.ops_per_command_buffer = static_cast<int>(n < 1 ? 1 : (n > 1000000 ? 1000000 : n));
  c.q8_activations = env_flag("TL_Q8_ACTIVATIONS");
}

}  // namespace tl
