// huge_pages.h: the packed weights and the KV cache on 2 MiB pages.
//
// A decode step reads every packed weight once: 3.65 GB for a 7B Q4_0 model. On the 4 KiB pages
// that operator new gets, that is ~890,000 pages per token, each one a translation the CPU must
// look up; its second-level TLB holds a few thousand, so nearly every page costs a walk of the
// page tables in the middle of the stream. On 2 MiB pages the same bytes are ~1,740 pages.
// Linux gives an anonymous mapping 2 MiB pages ("transparent huge pages") where it starts on a
// 2 MiB boundary and the program asks with madvise(MADV_HUGEPAGE) (where
// /sys/kernel/mm/transparent_hugepage/enabled says "madvise", as on Debian; "always" needs no
// asking, "never" refuses: then this allocator behaves as operator new).
// Measured on the 7B-shaped Q4_0 file, 2 threads (page 30): load 12-16 s -> 2.3-2.6 s (one page
// fault per 2 MiB instead of per 4 KiB while packing); decode unchanged on that (AMD) host.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "aligned.h"

constexpr std::size_t kSmallPage = 4096;                 // bytes, x86-64's base page
constexpr std::size_t kHugePage = std::size_t(2) << 20;  // bytes, x86-64's transparent huge page

/// n rounded up to a multiple of to (a page, a cache line).
constexpr std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

/// Allocations of at least one huge page come from a 2 MiB-aligned anonymous mapping marked
/// MADV_HUGEPAGE; smaller ones (below a page, they cannot use one) from CacheLineAllocator.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return CacheLineAllocator<T>().allocate(n);
    // Map one huge page more than needed, then unmap what lies before the first 2 MiB boundary
    // and after the end: mmap alone promises only 4 KiB alignment.
    const std::size_t length = round_up(bytes, kSmallPage);
    const std::size_t mapped = length + kHugePage;
    void* map = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) throw std::bad_alloc();
    auto* begin = static_cast<unsigned char*>(map);
    auto* aligned = reinterpret_cast<unsigned char*>(
        round_up(reinterpret_cast<std::uintptr_t>(begin), kHugePage));
    if (aligned != begin) munmap(begin, aligned - begin);
    const std::size_t tail = (begin + mapped) - (aligned + length);
    if (tail > 0) munmap(aligned + length, tail);
#ifdef MADV_HUGEPAGE
    madvise(aligned, length, MADV_HUGEPAGE);  // a hint: where the kernel says no, 4 KiB pages
#endif
    return reinterpret_cast<T*>(aligned);
  }

  void deallocate(T* p, std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return CacheLineAllocator<T>().deallocate(p, n);
    munmap(p, round_up(bytes, kSmallPage));
  }

  template <class U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

/// Frees what huge_page_array() allocated: n Ts.
template <class T>
struct HugePageDeleter {
  std::size_t n;
  void operator()(T* p) const { HugePageAllocator<T>().deallocate(p, n); }
};
template <class T>
using HugePageArray = std::unique_ptr<T[], HugePageDeleter<T>>;

/// n Ts left uninitialised (a std::vector would write every one): the kernel commits each 2 MiB
/// page, zeroed, when it is first written, so a KV cache costs memory as positions fill it.
template <class T>
HugePageArray<T> huge_page_array(std::size_t n) {
  return HugePageArray<T>(HugePageAllocator<T>().allocate(n), HugePageDeleter<T>{n});
}
