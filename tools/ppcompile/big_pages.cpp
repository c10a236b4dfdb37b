// ppcompile's large allocations come from an arena in transparent huge pages.
//
// A plan holds its actions in per-rank arrays: tens of megabytes in arrays of a few hundred
// kilobytes each (a 64-rank plan of 1.5 M actions: 64 arrays of 490 KB), plus the passes' tables.
// Through malloc every 4 KiB page of them costs a page fault when it is first written (a third of
// the process's time at that size, and 2-3 us a fault on a virtual machine), and arrays that small
// are never backed by 2 MiB pages. Here every allocation of at least kBig bytes comes from a
// HugePageArena: one fault per 2 MiB (43,000 faults -> about 300 for that plan). kBig is one page:
// a smaller plan's per-rank arrays are a few kilobytes to a few tens of kilobytes each (a 32-rank
// plan of 65,000 compute actions: 32 orders of 48 KB, and the passes' per-rank tables), and
// through malloc they were 700 of its 880 faults. Smaller allocations, and all of them if the
// arena cannot serve, go to malloc.
//
// This replaces the global operator new and delete of the ppcompile executable only: the library
// and its other users (tests, benchmarks) keep the standard ones.
#include <cstddef>
#include <cstdlib>
#include <new>

#include "tools/ppcompile/huge_page_arena.h"

namespace {

constexpr size_t kBig = 4 << 10;  // allocations from this size on come from the arena

// 16 GiB of address space (no memory until used): more than the largest plan ppcompile accepts
// needs. Constant-initialised, so it is ready for allocations made before main().
constinit ppc::HugePageArena arena(size_t{16} << 30);

void* allocate(size_t n) {
  if (n >= kBig)
    if (void* p = arena.allocate(n)) return p;
  if (n == 0) n = 1;
  while (true) {
    if (void* p = std::malloc(n)) return p;
    std::new_handler handler = std::get_new_handler();
    if (!handler) return nullptr;
    handler();
  }
}

void release(void* p) noexcept {
  if (arena.owns(p))
    arena.release(p);
  else
    std::free(p);
}

}  // namespace

void* operator new(size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  return operator new(n);
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {  // a new_handler may throw
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void operator delete(void* p) noexcept {
  release(p);
}
void operator delete[](void* p) noexcept {
  release(p);
}
void operator delete(void* p, size_t) noexcept {
  release(p);
}
void operator delete[](void* p, size_t) noexcept {
  release(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  release(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  release(p);
}
