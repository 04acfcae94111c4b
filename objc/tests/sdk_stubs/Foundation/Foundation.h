// Declarations-only stand-in for the part of Apple's Foundation that objc/ uses, so that
// objc/tests/check_objc_syntax.sh can compile the .mm files with clang on Linux
// (-fsyntax-only). Written from Apple's documented interfaces (names, argument and return
// types); nothing here is Apple's text. A method missing here fails the check: add it with the
// documented signature, never with a guess.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef unsigned long NSUInteger;
typedef long NSInteger;
typedef bool BOOL;  // arm64 macOS
#define YES true
#define NO false
#define nil nullptr

#pragma clang assume_nonnull begin

@protocol NSObject
@end

__attribute__((objc_root_class))
@interface NSObject <NSObject>
+ (instancetype)alloc;
+ (instancetype)new;
- (instancetype)init;
@end

@interface NSString : NSObject
+ (nullable instancetype)stringWithUTF8String:(const char* _Nonnull)nullTerminatedCString;
@property(nullable, readonly) const char* UTF8String;
@end

@interface NSError : NSObject
@property(nonnull, readonly, copy) NSString* localizedDescription;
@end

#pragma clang assume_nonnull end
