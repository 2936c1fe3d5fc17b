#pragma once
// What the preload's files share to reach the real libraries: the real dlsym (Note [dlsym override] in
// hooks.cpp) and the driver's handle. Defined in hooks.cpp.

namespace oomh::inject {

using DlsymFn = void* (*)(void*, const char*);

// The real dlsym; aborts with a message when it cannot be found (no program can run without it).
DlsymFn real_dlsym();
// libcuda.so.1, loaded on first use (RTLD_NOLOAD first); nullptr when there is none.
void* libcuda();

}  // namespace oomh::inject
