// COURSE_HOST_DEVICE: a function of the course's headers that device code calls too (nvcc), and
// that plain C++ compilers (the host-only parts, the CPU emulator) see as an ordinary function.
#pragma once

#if defined(__CUDACC__)
#define COURSE_HOST_DEVICE __host__ __device__
#else
#define COURSE_HOST_DEVICE
#endif
