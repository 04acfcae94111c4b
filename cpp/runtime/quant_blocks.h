// The GGUF block-quantized types' sizes: elements per block and bytes per block, exactly as ggml
// stores them. The one copy of these facts, read by the C++ runtime (dtype.h), the CPU and CUDA
// kernels and the Metal shaders (shaders/tl_common.h), so it is written as plain macros, the only
// syntax all three languages share. Layouts inside a block are the kernels' business.
#ifndef TL_QUANT_BLOCKS_H
#define TL_QUANT_BLOCKS_H

#define TL_QK 32     // elements per block: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
#define TL_QK_K 256  // elements per block: Q4_K, Q5_K, Q6_K (8 sub-blocks of 32)

#define TL_Q4_0_BLOCK_BYTES 18   // f16 d; 16 bytes of nibbles
#define TL_Q4_1_BLOCK_BYTES 20   // f16 d, f16 m; 16 bytes of nibbles
#define TL_Q5_0_BLOCK_BYTES 22   // f16 d; 4 bytes high bits; 16 bytes of nibbles
#define TL_Q5_1_BLOCK_BYTES 24   // f16 d, f16 m; 4 bytes high bits; 16 bytes of nibbles
#define TL_Q8_0_BLOCK_BYTES 34   // f16 d; 32 int8
#define TL_Q4_K_BLOCK_BYTES 144  // f16 d, f16 dmin, 12 bytes scales, 128 bytes nibbles
#define TL_Q5_K_BLOCK_BYTES 176  // f16 d, f16 dmin, 12 scales, 32 high bits, 128 nibbles
#define TL_Q6_K_BLOCK_BYTES 210  // 128 ql, 64 qh, 16 int8 scales, f16 d

#endif  // TL_QUANT_BLOCKS_H
