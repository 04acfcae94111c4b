// Declarations-only stand-in for the part of Apple's Metal framework that objc/ uses (see
// ../Foundation/Foundation.h for why and how these stubs are written). Enum values follow the
// documented raw values; protocols declare only the members objc/ calls.
#pragma once
#import <Foundation/Foundation.h>
#include <dispatch/dispatch.h>

#pragma clang assume_nonnull begin

typedef struct {
  NSUInteger width;
  NSUInteger height;
  NSUInteger depth;
} MTLSize;

static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize size = {width, height, depth};
  return size;
}

typedef NSUInteger MTLResourceOptions;
enum : NSUInteger {
  MTLResourceCPUCacheModeDefaultCache = 0,
  MTLResourceStorageModeShared = 0,       // MTLStorageModeShared << MTLResourceStorageModeShift
  MTLResourceStorageModePrivate = 2 << 4,
  MTLResourceHazardTrackingModeDefault = 0,
};

typedef enum : NSUInteger {
  MTLCommandBufferStatusNotEnqueued = 0,
  MTLCommandBufferStatusEnqueued = 1,
  MTLCommandBufferStatusCommitted = 2,
  MTLCommandBufferStatusScheduled = 3,
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5,
} MTLCommandBufferStatus;

typedef enum : NSUInteger {
  MTLDispatchTypeSerial = 0,
  MTLDispatchTypeConcurrent = 1,
} MTLDispatchType;

@protocol MTLResource <NSObject>
@end

@protocol MTLBuffer <MTLResource>
- (nonnull void*)contents;
@property(readonly) NSUInteger length;
@end

@protocol MTLFunction <NSObject>
@end

@protocol MTLLibrary <NSObject>
- (nullable id<MTLFunction>)newFunctionWithName:(nonnull NSString*)functionName;
@end

@protocol MTLComputePipelineState <NSObject>
@property(readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property(readonly) NSUInteger threadExecutionWidth;
@end

@protocol MTLCommandEncoder <NSObject>
- (void)endEncoding;
@end

@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(nonnull id<MTLComputePipelineState>)state;
- (void)setBytes:(nonnull const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(nullable id<MTLBuffer>)buffer
           offset:(NSUInteger)offset
          atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid
       threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
@end

@protocol MTLCommandBuffer;
typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer> _Nonnull buffer);

@protocol MTLCommandBuffer <NSObject>
- (nullable id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (nullable id<MTLComputeCommandEncoder>)computeCommandEncoderWithDispatchType:
    (MTLDispatchType)dispatchType;
- (void)addCompletedHandler:(nonnull MTLCommandBufferHandler)block;
- (void)commit;
- (void)waitUntilCompleted;
@property(readonly) MTLCommandBufferStatus status;
@property(nullable, readonly) NSError* error;
@end

@protocol MTLCommandQueue <NSObject>
- (nullable id<MTLCommandBuffer>)commandBuffer;
@end

@interface MTLCompileOptions : NSObject
@property(readwrite, nonatomic) BOOL fastMathEnabled;
@end

@protocol MTLDevice <NSObject>
@property(nonnull, readonly) NSString* name;
- (nullable id<MTLCommandQueue>)newCommandQueue;
- (nullable id<MTLBuffer>)newBufferWithLength:(NSUInteger)length
                                      options:(MTLResourceOptions)options;
- (nullable id<MTLLibrary>)newLibraryWithSource:(nonnull NSString*)source
                                        options:(nullable MTLCompileOptions*)options
                                          error:(NSError* _Nullable* _Nullable)error;
- (nullable id<MTLLibrary>)newLibraryWithData:(nonnull dispatch_data_t)data
                                        error:(NSError* _Nullable* _Nullable)error;
- (nullable id<MTLComputePipelineState>)
    newComputePipelineStateWithFunction:(nonnull id<MTLFunction>)computeFunction
                                  error:(NSError* _Nullable* _Nullable)error;
@end

extern "C" __attribute__((ns_returns_retained)) id<MTLDevice> _Nullable
MTLCreateSystemDefaultDevice(void);

#pragma clang assume_nonnull end
