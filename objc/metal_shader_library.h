#pragma once
// The compiled shader library and the shader source, embedded in the binary at build time by
// objc/embed_shaders.cmake (generated file tl_metal_shaders_embedded.cpp). The metallib is empty
// when the build machine had no Metal compiler; the source is always present, so start-up can
// compile it with newLibraryWithSource when the metallib is missing or refused by this macOS.
#include <cstddef>

namespace tl {
namespace metal {

extern const char kShaderSource[];           // all shaders/*.metal with their headers, one unit
extern const unsigned char kShaderMetallib[];  // xcrun metallib output, or a single 0 byte
extern const size_t kShaderMetallibSize;       // 0 when no metallib was built

}  // namespace metal
}  // namespace tl
