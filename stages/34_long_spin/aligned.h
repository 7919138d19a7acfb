// aligned.h: float buffers that start on a cache line.
//
// Threads write disjoint 64-float tiles of a matmul's output; when the buffer starts on a
// 64-byte boundary, no cache line holds results of two threads, so no line bounces between cores
// (false sharing, seed article §3.3). std::vector's default allocator only promises 16 bytes.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

constexpr std::size_t kCacheLine = 64;  // bytes, x86-64

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kCacheLine)));
  }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(kCacheLine)); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

/// A std::vector<float> whose data() is 64-byte aligned.
using AlignedFloats = std::vector<float, CacheLineAllocator<float>>;
