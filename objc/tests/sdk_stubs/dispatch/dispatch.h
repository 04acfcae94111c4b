// Declarations-only stand-in for the part of libdispatch that objc/ uses (see
// ../Foundation/Foundation.h for why and how these stubs are written). With Objective-C, dispatch
// objects are Objective-C objects managed by ARC, as on macOS.
#pragma once
#import <Foundation/Foundation.h>

#pragma clang assume_nonnull begin

@protocol OS_dispatch_object <NSObject>
@end
@protocol OS_dispatch_data <OS_dispatch_object>
@end
@protocol OS_dispatch_queue <OS_dispatch_object>
@end
typedef NSObject<OS_dispatch_data>* dispatch_data_t;
typedef NSObject<OS_dispatch_queue>* dispatch_queue_t;
typedef void (^dispatch_block_t)(void);

// DISPATCH_DATA_DESTRUCTOR_DEFAULT: the bytes are copied when the data object is created.
#define DISPATCH_DATA_DESTRUCTOR_DEFAULT nullptr

extern "C" __attribute__((ns_returns_retained)) dispatch_data_t _Nonnull dispatch_data_create(
    const void* _Nonnull buffer, size_t size, dispatch_queue_t _Nullable queue,
    dispatch_block_t _Nullable destructor);

#pragma clang assume_nonnull end
